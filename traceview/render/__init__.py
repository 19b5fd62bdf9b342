"""Renderers: turn analysis results into terminal tables, files and charts."""
