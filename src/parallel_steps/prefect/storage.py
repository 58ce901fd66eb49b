"""Prefect adapter: credentials blocks as the step's `storage_options`.

A `storage_options` value may be a block instead of options (prefect-aws's `AwsCredentials` or
`MinIOCredentials`, or an `S3Bucket`, whose credentials count), and inputs, side inputs, models and the
output may be `S3Bucket` blocks (their bucket and folder, with their credentials). The block's credentials
become fsspec options; from then on they are storage options like any other (masked everywhere, handed to
workers in their environment only). prefect-aws stays optional: blocks are known by what they offer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefect.blocks.core import Block

from ..errors import ConfigError
from ..storage.options import locations_as_urls


def with_blocks(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` with bucket blocks as their URLs and blocks in `storage_options` as fsspec options (an
    entry the step gives itself wins over a bucket's credentials)."""
    resolved, buckets = locations_as_urls(fields, _bucket_url)
    given = fields.get("storage_options") or {}
    if not isinstance(given, Mapping):  # not options: the field's own check says so
        return resolved
    options = {
        prefix: block_options(value, prefix) if isinstance(value, Block) else value for prefix, value in given.items()
    }
    for url, bucket in buckets.items():
        options.setdefault(url, block_options(bucket, url))
    if options:
        resolved["storage_options"] = options
    return resolved


def _bucket_url(value: Any) -> str | None:
    if not _is_bucket(value):
        return None
    return f"s3://{value.bucket_name}/{getattr(value, 'bucket_folder', '') or ''}".rstrip("/")


def _is_bucket(value: Any) -> bool:
    return isinstance(value, Block) and hasattr(value, "bucket_name") and hasattr(value, "credentials")


def block_options(block: Block, prefix: str) -> dict[str, Any]:
    """s3fs's options from an AWS (or MinIO) credentials block, or a bucket's: the keys its boto3 session
    holds now (a profile or an assumed role resolved here), its region, endpoint and TLS settings.

    Raises:
        ConfigError: the block holds no AWS credentials (naming the prefix and the block's type).
    """
    credentials = block.credentials if _is_bucket(block) else block
    if not hasattr(credentials, "get_boto3_session"):
        raise ConfigError(
            "storage_options",
            f"{prefix}: a {type(block).__name__} block holds no AWS credentials",
            "use prefect-aws's AwsCredentials, MinIOCredentials or S3Bucket, or fsspec options",
        )
    session = credentials.get_boto3_session()
    options: dict[str, Any] = {}
    frozen = session.get_credentials()
    if frozen is not None:
        frozen = frozen.get_frozen_credentials()
        options = {"key": frozen.access_key, "secret": frozen.secret_key}
        if frozen.token:
            options["token"] = frozen.token
    client: dict[str, Any] = {"region_name": session.region_name} if session.region_name else {}
    parameters = getattr(credentials, "aws_client_parameters", None)
    if parameters is not None:
        if parameters.endpoint_url:
            options["endpoint_url"] = parameters.endpoint_url
        if parameters.verify is not None and parameters.verify is not True:
            client["verify"] = parameters.verify if isinstance(parameters.verify, bool) else str(parameters.verify)
        if not parameters.use_ssl:
            options["use_ssl"] = False
    if client:
        options["client_kwargs"] = client
    return options
