"""The worker runtime and EntryScript: the code that runs inside a worker."""
