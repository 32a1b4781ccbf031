"""Facts of NVIDIA's stack: the GPUs and MIG profiles secureml knows, their Kubernetes names, Xid codes."""
