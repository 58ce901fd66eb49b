"""The run store: run directories, the ledger, output parts and the log layout."""
