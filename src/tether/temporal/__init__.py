"""tether.temporal: runs as Temporal workflows (``pip install 'tether[temporal]'``).

- ``tether.temporal.workflow``: ``RunWorkflow``, which drives the same
  ``tether.core`` machine as the asyncio driver (it imports nothing else of
  tether, so it replays deterministically);
- ``tether.temporal.activities``: the model, tools and reconcile hooks, run
  on workers;
- ``tether.temporal.client``: start a run, query it, approve, deny or
  reconcile its calls (workflow updates);
- ``tether.temporal.worker``: ``make_worker`` for ``tether worker``.

Nothing is imported here, so ``import tether.temporal`` does not load the SDK.
"""
