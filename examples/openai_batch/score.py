"""Send the requests of an OpenAI Batch API file to an OpenAI-compatible server, many at once.

The input is a batch file: JSON lines of `custom_id`, `method`, `url` and `body`. Each mini-batch of
its rows arrives as a DataFrame (the bodies as written); run() sends every row's request through the
`openai` client and returns one output line per row, as the Batch API writes them:

    {"custom_id": ..., "response": {"status_code": 200, "request_id": ..., "body": {...}}, "error": null}
    {"custom_id": ..., "response": null, "error": {"code": ..., "message": ...}}

run() is an `async def`, so a worker keeps `max_concurrency_per_worker` mini-batches in flight on one
event loop, and `--max-requests` bounds the requests in flight across them. The client retries 429 and
5xx answers and dropped connections (`--max-retries`), waiting as the server's Retry-After header says.
A request that still fails is an error line: the run counts it as a failed item (against
`error_threshold`), the others are kept, and a rerun of the step sends only the mini-batches that had
errors again (docs/model_servers.md).

Arguments: --base-url (default $OPENAI_BASE_URL), --max-requests, --max-retries, --timeout (seconds per
request); the API key comes from $OPENAI_API_KEY (a local server takes any).
"""

import argparse
import asyncio
import json
import os

import openai

_client: openai.AsyncOpenAI
_requests: asyncio.Semaphore


def init():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    parser.add_argument("--max-requests", type=int, default=64)
    parser.add_argument("--max-retries", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=120.0)
    args, _ = parser.parse_known_args()
    global _client, _requests
    _client = openai.AsyncOpenAI(
        base_url=args.base_url,
        api_key=os.environ.get("OPENAI_API_KEY", "not-needed"),
        max_retries=args.max_retries,
        timeout=args.timeout,
    )
    _requests = asyncio.Semaphore(args.max_requests)


async def run(mini_batch):
    return await asyncio.gather(*(_send(row) for row in mini_batch.to_dict("records")))


async def _send(row):
    """One request line -> one output line; what the server or the network refuses is the line's error."""
    endpoint = _ENDPOINTS.get(row["url"])
    if endpoint is None:
        return _error_line(row, "invalid_url", f"{row['url']} is not a batch endpoint ({', '.join(_ENDPOINTS)})")
    async with _requests:
        try:
            raw = await endpoint(_client).with_raw_response.create(**row["body"])
            body = raw.parse().model_dump(mode="json", exclude_unset=True)
        except openai.APIStatusError as exc:
            return _error_line(row, str(exc.status_code), exc.message)
        except (openai.APIConnectionError, json.JSONDecodeError) as exc:
            return _error_line(row, type(exc).__name__, str(exc))
    response = {"status_code": raw.status_code, "request_id": raw.headers.get("x-request-id"), "body": body}
    return {"custom_id": row["custom_id"], "response": response, "error": None}


def _error_line(row, code, message):
    return {"custom_id": row["custom_id"], "response": None, "error": {"code": code, "message": message}}


_ENDPOINTS = {
    "/v1/chat/completions": lambda client: client.chat.completions,
    "/v1/completions": lambda client: client.completions,
    "/v1/embeddings": lambda client: client.embeddings,
}
