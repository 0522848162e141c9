"""Widgets of the interactive app: one pane per view, plus the status bar and the chart."""
