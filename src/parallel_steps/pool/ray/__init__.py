"""The Ray pool: worker actors across a Ray cluster, placed by node, watched by a mailbox."""
