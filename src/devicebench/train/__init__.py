"""One training run, shared by cifar, unet and model: the epoch and step loops and the summary they log
(loop), what a run is given before its loop starts (setup), what the loops record (records), the sums
over epochs and ranks with the share of the device's peak (summary), per-class metrics (metrics) and the
confusion plot (figures). Layer 4: imports host, tracking.protocol, data and models, never mlflow."""
