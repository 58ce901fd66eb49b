"""`RayCluster`: a Prefect block with a Ray cluster's address and token (`parallel_run(ray_cluster=...)`),
so that neither is in flow code, flow parameters or the environment of the worker.

The token is a secret field (obfuscated in the UI and the API); a token kept in a `Secret` block goes in as
`RayCluster(address=..., token=Secret.load("ray-token").get())`. It is granted to this process's Ray calls
for that address only (`cluster.access.grant`) and never becomes a config field, so it is in no run.json,
step.json, artifact or log.
"""

from __future__ import annotations

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

from ..cluster.access import ClusterAccess, grant, on_cluster
from ..config import ParallelRunConfig
from ..errors import ConfigError


class RayCluster(Block):
    """A Ray cluster: the Jobs API (http(s)://head:8265) or the GCS (head:6379), and its token.

    Example:
        >>> RayCluster(address="https://ray-head.internal:8265", token=token).save("prod")
        >>> parallel_run("step.yaml", backend="ray", submit_to="ray_job", ray_cluster="prod")
    """

    _block_type_name = "Ray Cluster (parallel-steps)"
    _block_type_slug = "parallel-steps-ray-cluster"
    _description = "A Ray cluster's address and token, for parallel_run steps that run on Ray."

    address: str = Field(description="The Jobs API (http(s)://head:8265) or the GCS (head:6379).")
    token: SecretStr | None = Field(default=None, description="The cluster's token (RAY_AUTH_TOKEN), if it has one.")
    verify: bool | str = Field(
        default=True, description="TLS check of an https Jobs API: true, false, or the path of a CA bundle."
    )

    def use(self, config: ParallelRunConfig) -> ParallelRunConfig:
        """`config` run on this cluster: its address set, its token granted to this process."""
        config = on_cluster(config, self.address, "ray_cluster", "ray_cluster", "the block")
        token = self.token.get_secret_value() if self.token else None
        grant(self.address, ClusterAccess(token=token, verify=self.verify))
        return config


def use_cluster(config: ParallelRunConfig, cluster: RayCluster | str) -> ParallelRunConfig:
    """`config` on `cluster`: a `RayCluster`, or the name of a saved one."""
    block = RayCluster.load(cluster) if isinstance(cluster, str) else cluster
    if not isinstance(block, RayCluster):
        raise ConfigError(
            "ray_cluster", f"{cluster!r} is not a RayCluster block", "save one with RayCluster(...).save(NAME)"
        )
    return block.use(config)
