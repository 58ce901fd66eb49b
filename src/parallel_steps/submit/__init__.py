"""Where a run's driver can be sent besides this machine (`submit_to`): `ray_job.py`, a Ray job on a cluster."""
