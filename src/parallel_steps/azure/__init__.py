"""Azure ML compatibility: the `azureml.core` names entry scripts use, `mini_batch_context`, and v2 job files."""
