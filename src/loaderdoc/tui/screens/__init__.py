"""Screens of the interactive app: the main tabbed screen and the modal dialogs."""
