"""The lab handed to an existing distributed engine: the verl-on-Ray bundle and its offline check."""
