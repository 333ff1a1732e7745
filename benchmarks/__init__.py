"""`make bench`: each figure is a ratio of two things measured in the same run, so machine speed cancels out."""
