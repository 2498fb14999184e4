"""Imported last by the apps' fork server (tests/app_process.py): its import freezes the fork
server's heap, everything the preloaded modules made, out of the cyclic garbage collector's
reach before any fork.

Every fork shares those pages with the server until it writes to them, and a full collection
in a fork walked all of them (~340,000 objects, 0.23 CPU-s a collection) and wrote to each
object's collector header, copying every page they lie on. Frozen, an app's start (fork to
its first page answered, on a copy of the drafted demo database, quiet 2-core machine) costs
0.48-0.70 CPU-s instead of 0.70-0.84; an app that serves pages for a while costs the same
either way (so the app itself does not freeze its heap: nothing measurable to win)."""

import gc

gc.collect()
gc.freeze()
