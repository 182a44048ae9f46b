"""``semijoin changes enable|disable|status|prune``: capture every writer's changes to a master
table R, and keep its history within bounds (:mod:`.core.stores.horizon`)."""

from __future__ import annotations

import time

from .core.stores.horizon import BATCH_ROWS, KEEP_VERSIONS, READER_TTL_S


def add_changes(sub) -> None:
    c = sub.add_parser("changes", help="capture every writer's changes to a master table (triggers or the binary "
                       "log), so running joins see them; show or prune the history kept")
    c.add_argument("action", choices=["enable", "disable", "status", "prune"])
    c.add_argument("--master", required=True, help="sqlite:///path.db or mysql://user@host:port/db "
                   "(password from SEMIJOIN_DB_PASSWORD)")
    c.add_argument("--table", required=True)
    c.add_argument("--key", required=True, help="join key column of the master table")
    c.add_argument("--via", choices=["triggers", "binlog"], default="triggers",
                   help="enable: triggers on R (SQLite, MySQL/MariaDB; default), or MySQL/MariaDB's binary log "
                        "(log_bin, binlog_format=ROW, binlog_row_image=FULL, REPLICATION SLAVE/CLIENT; a unique key)")
    c.add_argument("--reader-ttl", type=float, default=READER_TTL_S, metavar="SECONDS",
                   help=f"status/prune: a reader not seen for this long no longer holds history back "
                        f"(default {READER_TTL_S:g})")
    c.add_argument("--keep-versions", type=int, default=KEEP_VERSIONS,
                   help=f"prune: the newest versions kept whatever the readers (default {KEEP_VERSIONS})")
    c.add_argument("--batch-rows", type=int, default=BATCH_ROWS,
                   help=f"prune: rows deleted a transaction (default {BATCH_ROWS})")
    c.set_defaults(func=cmd_changes)


def cmd_changes(args) -> int:
    from .core.stores import open_store
    from .core.stores.capture import disable_capture, enable_capture

    if args.action == "enable" and args.via == "binlog":
        from .core.stores.binlog import BinlogCapture

        with BinlogCapture(args.master, args.table, args.key) as capture:
            position = capture.enable()
        print(f"changes to {args.table} by any writer are captured from the binary log from {position} on "
              "(a running join reads it: change_capture: binlog)")
        return 0
    with open_store(args.master, args.table, args.key) as store:
        if args.action == "enable":
            created = enable_capture(store)
            print(f"changes to {args.table} by any writer are captured (triggers {'created' if created else 'were there'}); "
                  f"R is at version {store.version()}")
        elif args.action == "disable":
            dropped = disable_capture(store)
            print(f"changes to {args.table} are no longer captured ({'triggers dropped' if dropped else 'there were no triggers'}); "
                  "its change log stays")
        elif args.action == "status":
            how = "from the binary log" if store.captured_from_binlog() else "by triggers"
            print(f"{args.table}: changes {'captured ' + how if store.captures_writes() else 'NOT captured'}, "
                  f"version {store.version()}")
            if store.has_change_log():
                print_history(store.connection, args.table, args.reader_ttl, args.keep_versions)
        else:
            prune(store, args)
    return 0


def print_history(connection, table: str, reader_ttl_s: float, keep_versions: int) -> None:
    from .core.stores.horizon import history_rows, horizon_of

    h = horizon_of(connection, table, time.time(), reader_ttl_s=reader_ttl_s, keep_versions=keep_versions)
    rows = ", ".join(f"{name} {n:,}" for name, n in history_rows(connection, table).items())
    kept = "no versions" if h.oldest is None else f"versions {h.oldest:,}..{h.newest:,}"
    print(f"history  {kept} ({rows} rows)")
    lowest = f", the lowest at version {min(r.version for r in h.live):,}" if h.live else ""
    print(f"readers  {len(h.live)} seen within {reader_ttl_s:g} s{lowest}; {len(h.stale)} not seen since (no longer counted)")
    below = max(h.version - (h.oldest or h.version), 0)
    print(f"horizon  version {h.version:,}: {below:,} versions below it may be pruned (`semijoin changes prune`)")


def prune(store, args) -> None:
    from .core.errors import ConfigError
    from .core.stores.horizon import prune_history

    if not store.has_change_log():
        raise ConfigError(f"--table: {args.table!r} has no change log to prune; nothing captures its history")
    for name in ("keep_versions", "batch_rows"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')}: {getattr(args, name)} is not a positive whole number")
    pruned = prune_history(store.connection, args.table, time.time(), reader_ttl_s=args.reader_ttl,
                           keep_versions=args.keep_versions, batch_rows=args.batch_rows)
    rows = ", ".join(f"{name} {n:,}" for name, n in pruned.rows.items())
    print(f"pruned {args.table}'s history below version {pruned.horizon.version:,} in {pruned.transactions} "
          f"transactions ({rows} rows deleted)")
