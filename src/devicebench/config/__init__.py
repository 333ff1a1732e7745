"""What a run is asked to do: the field machinery (fields), one frozen dataclass per workload
(workloads), the job fields every workload shares (job_fields), the environment (settings) and run
names (naming). Layer 1: imports only layer 0. Torch-free, so reading a plan or a report needs no torch."""
