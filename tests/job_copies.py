"""A store of many finished jobs, made cheaply (bench/lasting.py and tests/test_keys_and_scale.py): one job run and
decided through the program's own write path, then its rows copied table by table and column by column as the program
wrote them, each copy's jobId and threadId substituted in every text column (its job record, journal and chain name
it). A copy is a listed, finished job exactly like the original; its chain names it, so `verify` of a copy is not
what a caller measures. A job encrypted at rest is not copied (its data key is bound to its jobId)."""

JOB_TABLES = ("jobs", "job_locks", "calls", "call_events", "drafts", "outcomes", "decisions", "receipts", "links")
THREAD_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def copy_job(admin: str, job_id: str, first: int, count: int) -> None:
    """Copies first..first+count-1 of the job's rows, every text column with the job's and thread's ids substituted."""
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        thread = conn.execute("SELECT thread_id FROM durable_job.jobs WHERE job_id = %s", (job_id,)).fetchone()[0]
        for table in JOB_TABLES + THREAD_TABLES:
            columns = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'durable_job' AND table_name = %s "
                "AND is_identity = 'NO' AND coalesce(column_default, '') NOT LIKE 'nextval%%' ORDER BY ordinal_position",
                (table,),
            ).fetchall()
            names, shown = [], []
            for name, kind in columns:
                names.append(f'"{name}"')
                if kind in ("text", "character varying", "jsonb", "json"):
                    text = f'"{name}"::text'
                    swapped = f"replace(replace({text}, %(thread)s, %(thread)s || '-' || g), %(job)s, %(job)s || '-' || g)"
                    shown.append(f"({swapped})::{kind}" if kind in ("jsonb", "json") else swapped)
                else:
                    shown.append(f'"{name}"')
            key = "thread_id" if table in THREAD_TABLES else "job_id"
            conn.execute(
                f"INSERT INTO durable_job.{table} ({', '.join(names)}) SELECT {', '.join(shown)} FROM durable_job.{table}, "
                f"generate_series(%(first)s::int, %(last)s::int) g WHERE {key} = %(key)s",
                {
                    "thread": thread,
                    "job": job_id,
                    "first": first,
                    "last": first + count - 1,
                    "key": thread if key == "thread_id" else job_id,
                },
            )
        conn.execute("ANALYZE")
