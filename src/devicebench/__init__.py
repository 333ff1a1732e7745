"""devicebench: how much faster is this PyTorch workload on the GPU than on the CPU, measured honestly."""

__version__ = "0.1.0"
