"""Add each partition's total income to its rows, as Azure's partition-per-column sample does:
run() gets the rows of one Store and Brand, with the key columns last."""


def init():
    print("Init")


def run(mini_batch):
    print(f"run method start: {__file__}, run({mini_batch})")
    total_income = mini_batch["INCOME"].sum()
    print(f"total_income = {total_income}")
    mini_batch["total_income"] = total_income

    return mini_batch
