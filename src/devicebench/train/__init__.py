"""One training run, shared by cifar and unet: epochs and steps (fit, training), their sums and the share
of the device's peak (totals, utilization), per-class metrics (metrics) and the confusion plot (figures).
Layer 4: imports host, tracking's protocol, data and models, never mlflow."""
