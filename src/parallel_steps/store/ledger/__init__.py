"""The run ledger (`ledger.sqlite`): the plan, every outcome, the slice of every success.

`writes.py` owns the schema and the batched commits (the driver is the only writer), `queries.py`
every read, `members.py` the plan's member files kept once.
"""

from .writes import Ledger, PlanRow

__all__ = ["Ledger", "PlanRow"]
