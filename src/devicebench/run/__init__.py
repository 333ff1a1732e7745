"""The top: the command line (cli), one workload run from flags to the finished MLflow run (workload),
a torchrun job (launch) and CPU tuning (tuning). Layer 8: may import every layer below."""
