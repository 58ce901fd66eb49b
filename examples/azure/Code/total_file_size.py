"""Sum up the sizes of the files of each partition, as Azure's partition-per-folder sample does:
run() takes the optional second parameter `mini_batch_context`."""

import os


def init():
    print("Init")


# For partitioned jobs, run() may take a second positional parameter, `mini_batch_context`,
# which describes the mini-batch.
def run(mini_batch, mini_batch_context):
    print(f"run method start: {__file__}, run({mini_batch}, {mini_batch_context})")
    # partition_key_value: the values of partition_keys shared by the files of this mini-batch
    print(f"partition_key_value = {mini_batch_context.partition_key_value}")
    # dataset: the subset of the input with these values
    print(f"dataset = {mini_batch_context.dataset}")

    sizes = [os.path.getsize(path) for path in mini_batch]
    total = sum(sizes)
    user = mini_batch_context.partition_key_value["user"]
    genres = mini_batch_context.partition_key_value["genres"]

    # With append_row, each returned element is one line of the output file (str() of it),
    # so format the line here.
    return [
        ",".join(str(field) for field in (os.path.basename(path), size, size / total, user, genres, total))
        for path, size in zip(mini_batch, sizes)
    ]
