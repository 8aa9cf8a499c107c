"""Warm a campaign's retrieval indexes and caches before its next turn needs them (issue 16).

A process that has just started, or a bank that has just been written to,
would otherwise make the next turn read 10,000 memories' words and vectors
and 20,000 passages' vectors out of SQLite (seconds, not milliseconds). The
play socket warms its campaign when it opens and the memory step after it
writes, each in a worker thread, never on the thread all database work of
the sockets shares, one at a time per campaign; and every turn first brings
the indexes up to date on a worker thread (``indexes``), which is where an
import's new vectors are read. Warming only reads; a failure is logged and
the turn then reads what it needs itself. When the built-in narrator is the
one that plays, warming also starts its process, which loads its model
meanwhile (``llm.warm``).
"""

import asyncio
import importlib
import logging

from django.db import connection
from django.template.loader import get_template

from campaigns import lineage
from campaigns.models import Campaign
from knowledge import retrieval
from knowledge.importer import embedding_model

from . import context, llm
from .context import memories as memory_section

logger = logging.getLogger(__name__)

_tasks = {}  # campaign id -> the warming task
TEMPLATES = ("campaigns/_turn_start.html", "campaigns/_play_body.html")  # what a turn renders: compiled once


def start(campaign_id):
    """Warm ``campaign_id`` in a worker thread, unless it is already being warmed; return the task."""
    task = _tasks.get(campaign_id)
    if task is not None and not task.done():
        return task
    task = _tasks[campaign_id] = asyncio.get_running_loop().create_task(asyncio.to_thread(warm, campaign_id))
    return task


async def settle():
    """Wait until every warming started in this loop has finished (tests and the benchmark)."""
    loop = asyncio.get_running_loop()
    tasks = [task for task in list(_tasks.values()) if task.get_loop() is loop and not task.done()]
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


def _warm_http():
    """Make now what the first model request of a process would: 40-80 ms of it, else paid by the first turn."""
    llm.tls_context()
    # httpx loads its connection machinery on its first request.
    importlib.import_module("httpcore")
    importlib.import_module("anyio._backends._asyncio")


def indexes(campaign_id):
    """Bring ``campaign_id``'s bank and library indexes up to date here, on a worker thread.

    A turn calls it before it reads on the shared thread, so that reading a
    bank or a library that has changed (or a process's first turn) never
    holds up everybody else's database work; when they are current it costs
    two stamp reads.
    """
    try:
        campaign = Campaign.objects.filter(pk=campaign_id).first()
        if campaign is not None:
            _indexes(campaign)
    except Exception:  # noqa: BLE001 — a cold cache is slower, never wrong
        logger.exception("reading campaign %s's indexes failed", campaign_id)
        connection.close()
    # Otherwise the worker thread keeps its connection for the next turn (CONN_MAX_AGE): opening one costs more
    # than the two stamp reads.


def _indexes(campaign):
    model = embedding_model(campaign)
    memory_section.bank_index(campaign.pk).vectors(model)
    retrieval.library_index(campaign.pk).warm(model)


def _rehearse(campaign, path):
    """Rank once by meaning, with a stored vector as the query: numpy's and the ranking's first calls are slow."""
    model = embedding_model(campaign)
    matrix, _ = memory_section.bank_index(campaign.pk).vectors(model)
    if len(matrix):
        vector = tuple(matrix[0].tolist())
        memory_section.section(campaign, path, memory_section.Query("", "", vector, vector, model))
    vector = retrieval.library_index(campaign.pk).sample_vector(model)
    if vector is not None:
        retrieval.retrieve(campaign, retrieval.Query("", (), vector, model))


def warm(campaign_id):
    """Read everything a turn of ``campaign_id`` keeps in memory: its bank, its library, its prompt's parts."""
    try:
        campaign = Campaign.objects.filter(pk=campaign_id).first()
        if campaign is None:
            return
        llm.warm(campaign.narrator_model or None)  # the built-in narrator loads its model meanwhile, in its process
        _warm_http()
        _indexes(campaign)
        for name in TEMPLATES:
            get_template(name)
        path = lineage.path_of(campaign)
        try:
            # Read-only: the tokenizer, the state's caches, the checkpoint's check, the knowledge stems.
            context.build(campaign, path, context.Action(mode="continue"))
        except context.ContextOverflow:
            pass  # the turn will say so, or summarise first
        _rehearse(campaign, path)
    except Exception:  # noqa: BLE001 — a cold cache is slower, never wrong
        logger.exception("warming campaign %s failed", campaign_id)
    finally:
        connection.close()  # this worker thread's own connection
