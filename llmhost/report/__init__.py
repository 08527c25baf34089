"""Benchmark reporting: load a run directory, build tables / KPI cards / figures, render one offline HTML page.

Modules follow the data: load (run dir -> dataclasses) -> tables, kpis (pure rows) -> figures, timeline (plotly
figures) -> page (HTML + atomic write) -> dashboard (assembly). Entry point: make_dashboard.py.
"""
