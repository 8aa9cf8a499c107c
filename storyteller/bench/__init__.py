"""Benchmark groups, one module each, that ``manage.py bench --only GROUP`` runs (storyteller/management/commands/bench.py).

A group is a function of (sizes, repeat) that returns result rows; it may
import the app's pipeline, and nothing in the app imports it.
"""
