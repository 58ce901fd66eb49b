"""Worker pools: the interface and its local (processes) and Ray (actors) implementations."""
