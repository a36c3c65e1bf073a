"""The validation table made from run logs, and its plots. No torch: `invoke report` and `grpolab report` share it.
table.py holds the command (run_report, its arguments, write_report); runlogs.py reads and merges the run logs,
rows.py makes the table's rows, lesson.py holds the lesson's figures per track, render.py writes the Markdown, CSV
and HTML, plots.py draws the plots."""
