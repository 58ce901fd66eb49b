"""The local pool: worker processes on this machine, one socket pair and one mini-batch deadline each."""
