"""The judged comparison as people read it: tables with declared columns, then Markdown, HTML, the
terminal table, the report run's name, description and metrics, runs.csv and charts, all from the
same tables. It and the judge's verdict lines spell figures only through `util.fmt`."""
