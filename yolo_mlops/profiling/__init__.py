"""What is measured inside the training steps, beside the NVML sampler (yolo_mlops.nvml):

- `torch_profiler`: torch.profiler over a window of steps, driven by one `ProfilerSettings`: the Chrome trace,
  the `key_averages` tables and the memory timeline.
- `step_timer`: every training step's time, not only the profiled ones, with the wait for data apart.
- `memory_holders`: the device's peak memory split by what holds it (parameters, gradients, optimizer state,
  activations), from torch's own memory profiler.
- `cuda_memory`: the CUDA allocator's history over the profiled steps, for PyTorch's memory visualiser.
- `trace_gzip`: indexed multi-member gzip, the form traces are exported in, and its readers.
"""
