"""Datasets: CIFAR-10 and Pascal VOC 2012 in their real on-disk formats, and labelled look-alikes for offline runs."""
