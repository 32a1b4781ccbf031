"""What runs inside the pod: the launcher stages and the native quota shim."""
