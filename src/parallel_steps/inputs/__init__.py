"""Inputs layer: datasets, the planner that splits them into mini-batches, and loaders."""
