"""Split a CSV file by key columns into one folder per key, and describe the folders in an MLTable file,
as Azure's oj-sales partitioning component does: <Store>/<Brand>/partitioned_data.csv without the key
columns, which the MLTable's `extract_columns_from_partition_format` gives back."""

import argparse
import os
import re

import pandas as pd
import yaml


def folder_name(value) -> str:
    return re.sub(r"[.\s\\|*/<>?:\"]", "_", str(value))


parser = argparse.ArgumentParser()
parser.add_argument("--data_source", type=str)
parser.add_argument("--partition_keys", type=str)
parser.add_argument("--tabular_output_data", type=str)
args, _ = parser.parse_known_args()

frame = pd.read_csv(args.data_source)
keys = args.partition_keys.split(",")
for values, group in frame.groupby(keys):
    folder = os.path.join(args.tabular_output_data, *[folder_name(v) for v in values])
    os.makedirs(folder, exist_ok=True)
    group.drop(columns=keys).to_csv(os.path.join(folder, "partitioned_data.csv"), index=False)

table = {
    "type": "mltable",
    "paths": [{"pattern": "./**/*.csv"}],
    "transformations": [
        {
            "read_delimited": {
                "delimiter": ",",
                "encoding": "ascii",
                "header": "all_files_same_headers",
                "empty_as_string": False,
                "include_path_column": True,
            }
        },
        {
            "extract_columns_from_partition_format": {
                "partition_format": "".join(f"{{{k}}}/" for k in keys) + "{file_name}.{extension}"
            }
        },
        {"drop_columns": ["Path", "file_name", "extension"]},
    ],
}
with open(os.path.join(args.tabular_output_data, "MLTable"), "w") as file:
    yaml.dump(table, file, default_flow_style=False)
print(f"partitioned {len(frame)} rows by {keys} into {args.tabular_output_data}")
