"""Where data lives: local paths and fsspec URLs listed, opened, fetched and retried; the options of each
URL prefix; `azureml://datastores/` paths. Inputs, outputs, side inputs and models all use it."""
