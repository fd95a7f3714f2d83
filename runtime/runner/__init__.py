"""The model runner: turns a step's plain data into tensors, runs the model (eager or CUDA graphs) and samples; KV pool, attention backend, KV block copies."""
