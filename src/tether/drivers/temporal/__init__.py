"""tether.drivers.temporal: runs as Temporal workflows (``pip install 'tether[temporal]'``).

- ``tether.drivers.temporal.workflow``: ``RunWorkflow``, which drives the same
  ``tether.core`` machine as the asyncio driver (it imports nothing else of
  tether, so it replays deterministically);
- ``tether.drivers.temporal.activities``: the model, tools and reconcile hooks, run
  on workers;
- ``tether.drivers.temporal.client``: start a run, query it, approve, deny or
  reconcile its calls (workflow updates);
- ``tether.drivers.temporal.worker``: ``make_worker`` for ``tether worker``;
- ``tether.drivers.temporal.codec``: the payloads encrypted on clients and
  workers when a key is set, so the server stores ciphertext.

Nothing is imported here, so ``import tether.drivers.temporal`` does not load the SDK.
"""
