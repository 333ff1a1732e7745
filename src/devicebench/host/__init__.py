"""The machine a run measures: device resolution and the host fingerprint (device, gpu_info, cpu), the
math a precision means on it (precision), its datasheet peaks (peaks), the one timer (timing), a torchrun
rank's place in its job (job: torch-free; distributed: the process group) and what a workload is handed
(context). Layer 2: imports config and layer 0."""
