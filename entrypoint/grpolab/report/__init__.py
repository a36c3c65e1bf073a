"""The validation table made from run logs, and its plots. No torch: `invoke report` and `grpolab report` share it."""
