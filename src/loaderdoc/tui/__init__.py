"""The interactive app (Textual). Only this package imports textual.

``loaderdoc.tui.model`` holds everything the screens show, computed without a terminal;
``loaderdoc.tui.app.make_app`` builds the app for the CLI, the tests and the screenshot script.
"""
