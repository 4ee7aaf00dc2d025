"""Schemathesis hooks for test_server.py (loaded through SCHEMATHESIS_HOOKS): a generated
request body whose "model" is a string names the served model (LH_SERVED_MODEL_ID), so that
the cases reach the request checks and the engine instead of stopping at 404
model_not_found (which test_server.py checks on its own). Bodies whose "model" has another
type, or none, are left as generated."""
import os

import schemathesis

MODEL_ID = os.environ.get("LH_SERVED_MODEL_ID", "")


@schemathesis.hook
def map_body(context, body):
    if MODEL_ID and isinstance(body, dict) and isinstance(body.get("model"), str):
        body = dict(body, model=MODEL_ID)
    return body
