"""The trust boundary of trigger-time input: which configuration fields a DAG param, a trigger conf
(or any value a less trusted caller supplies) may change.

Writing a DAG is a higher privilege than triggering it: Airflow's own security model treats
trigger conf as untrusted user input. So by default such input may change only the fields the
config model marks overridable (`config.TRIGGER`): partitioning, thresholds, retries and
timeouts, concurrency, reuse and logging - never the code that runs, its environment, or
where data is read or written. A DAG author names other fields to open them, or opens all
of them with "all".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..errors import ConfigError
from .model import ParallelRunConfig

FIELDS = tuple(ParallelRunConfig.model_fields)
#: The fields trigger-time input may change unless the author says otherwise.
OVERRIDABLE = frozenset(
    name
    for name, field in ParallelRunConfig.model_fields.items()
    if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("trigger_overridable")
)
ALL = "all"

#: What an author allows: True (the overridable fields), False (none), "all", or field names (exactly those).
Allowed = bool | str | Collection[str]


def allowed_fields(allow: Allowed) -> frozenset[str]:
    """The fields `allow` opens; unknown field names are a ConfigError naming the first."""
    if allow is True:
        return OVERRIDABLE
    if allow is False or allow is None:
        return frozenset()
    if allow == ALL:
        return frozenset(FIELDS)
    names = [allow] if isinstance(allow, str) else list(allow)
    unknown = sorted(set(names) - set(FIELDS))
    if unknown:
        raise ConfigError(
            "params_override", f"{unknown[0]!r} is not a configuration field", 'use True, False, "all" or field names'
        )
    return frozenset(names)


def trigger_overrides(params: Mapping[str, Any], allow: Allowed, how_to_allow: str) -> dict[str, Any]:
    """The config fields named in `params` (non-None values) as overrides, when `allow` opens them;
    none with `allow` False (params are then not read at all).

    Raises:
        ConfigError: `params` names a field `allow` does not open; the message names the field and
            says how an author opens it (`how_to_allow`, with `{field}` filled in).
    """
    if allow is False or allow is None:
        return {}  # the author reads params only through templates, if at all
    opened = allowed_fields(allow)
    overrides = {}
    for name in FIELDS:
        if params.get(name) is None:
            continue
        if name not in opened:
            raise ConfigError(
                name,
                "may not be set by trigger-time input (it is not among the fields the author opened)",
                how_to_allow.format(field=name),
            )
        overrides[name] = params[name]
    return overrides
