"""Drafting: running a model preset over studies (in process, in a worker, or on Ray) and keeping
its drafts."""
