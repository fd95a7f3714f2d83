"""Model code: the dense decoder layers and their ops, the HF config reader, the checkpoint loader and the architecture registry."""
