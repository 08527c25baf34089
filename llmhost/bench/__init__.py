"""Phase 3: the stress test: workloads -> arms -> points -> runner -> store, with GPU telemetry."""
