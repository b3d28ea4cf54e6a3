"""The mutants `make mutate` runs: small, plausible bugs, each in the code of one guarantee the contract states.

Each is an exact piece of durable_job.py, or of the file its `path` names (the web app's mutants:
durable_job_team/web.py), (`old`, found exactly once) and what it becomes (`new`), with
the tests that must notice: the guarantee's own tests in tests/test_guarantees.py first. The first six
are the ones an independent mutation run found surviving the suite (issue 25); keep them.
"""

from dataclasses import dataclass, field

G = "tests/test_guarantees.py"
M011 = "durable_job_team/migrations/m011_hostile_roles.sql"  # a migration mutated: what a buggy release would have shipped
STORE_PY = "durable_job_team/store.py"  # the store extension
WORKERS_PY = "durable_job_team/workers.py"  # the workers' extension
CLI_PY = "durable_job_team/cli.py"  # the team's commands (moved out of durable_job.py, issue 46)
ENGINE = "tests/test_engine.py"  # the engine and its seal
REQUEST = "tests/test_request.py"  # a job that asks a question
WRITER = "tests/test_writer.py"  # a job that drafts its answer


@dataclass
class Mutant:
    name: str
    guarantee: str
    old: str
    new: str
    tests: list = field(default_factory=list)
    path: str = "durable_job.py"  # the file holding `old`, from the repository's root


MUTANTS = [
    # --- the six an independent run found surviving ---------------------------------------------------------
    Mutant(
        "quote-case-insensitive",
        "validation: a quote is an exact substring of the source",
        "    if quote not in source:\n",
        "    if quote.lower() not in source.lower():\n",
        [f"{G}::test_a_quote_must_match_the_source_exactly_case_and_spacing_included"],
    ),
    Mutant(
        "store-sources-unchecked",
        "seals: a store's sources are checked against their sha256 on every later command",
        'texts = {item["id"]: check_source_bytes(item, data) for item, data in opened}',
        'texts = {item["id"]: bytes(data).decode("utf-8") for item, data in opened}',
        [f"{G}::test_a_stores_copies_of_the_manifest_and_sources_are_checked_on_every_later_command"],
        path=STORE_PY,
    ),
    Mutant(
        "retry-draft-in-second-transaction",
        "retry: the answer and its draft commit together",
        '            record_event(journal, key, "completed", {"responseId": response_id, "requestId": request_id})\n            if then is not None:\n                then(journal, key, output_text)\n',
        '            record_event(journal, key, "completed", {"responseId": response_id, "requestId": request_id})\n        if then is not None:\n            then(journal, key, output_text)\n',
        [f"{G}::test_a_retrys_answer_and_its_draft_commit_together_or_not_at_all"],
    ),
    Mutant(
        "canonical-ascii",
        "operation key: the recipe never drifts (canonical JSON keeps non-ASCII as is)",
        'json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)',
        'json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)',
        [f"{G}::test_the_operation_key_and_results_hash_of_a_known_non_ascii_job_never_drift"],
    ),
    Mutant(
        "run-lock-shared",
        "locks: one writer at a time on a state directory",
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
        "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)",
        [f"{G}::test_a_running_writer_refuses_every_other_writer_and_never_blocks_a_reader"],
    ),
    Mutant(
        "store-receipt-of-any-job",
        "store: each job reads its own receipt",
        'row = db.row("SELECT receipt_json FROM durable_job.receipts WHERE job_id = {p.job_id}")',
        'row = db.row("SELECT receipt_json FROM durable_job.receipts ORDER BY written_utc DESC LIMIT 1")',
        [f"{G}::test_two_jobs_in_one_store_each_keep_their_own_calls_and_receipt"],
        path=STORE_PY,
    ),
    # --- journal order and statuses ---------------------------------------------------------------------------
    Mutant(
        "pending-not-refused",
        "journal: a pending call is never sent again",
        '            raise uncertain_refusal(item["id"], row["operation_key"])\n        attempt = ',
        "            pass\n        attempt = ",
        [f"{G}::test_a_pending_call_is_committed_before_the_request_and_never_sent_again"],
    ),
    Mutant(
        "server-error-rejected",
        "journal: a 5xx may have run: it stays pending",
        '"rejected" if type(code) is int and code in REFUSAL_STATUSES else "pending"',
        '"rejected" if type(code) is int and code >= 400 else "pending"',
        [f"{G}::test_each_provider_answer_is_journaled_with_its_status"],
    ),
    Mutant(
        "429-pending",
        "journal: 429 is a definite refusal",
        "REFUSAL_STATUSES = frozenset({400, 401, 403, 404, 422, 429})",
        "REFUSAL_STATUSES = frozenset({400, 401, 403, 404, 422})",
        [f"{G}::test_each_provider_answer_is_journaled_with_its_status"],
    ),
    Mutant(
        "late-answer-overwrites",
        "journal: an answer for a call reconciled meanwhile writes nothing",
        "updated_utc = {p.stamp} WHERE {scope}operation_key = {p.key} AND status = 'pending'\"\n    )\n",
        'updated_utc = {p.stamp} WHERE {scope}operation_key = {p.key}"\n    )\n',
        ["test_durable_job.py::test_complete_call_changes_only_a_pending_row_and_stores_no_key"],
    ),
    Mutant(
        "parallel-results-out-of-order",
        "journal: parallel results are recorded in manifest order",
        "    return [errors[n] for n in sorted(errors)]  # in the order the calls were given",
        "    return [errors[n] for n in sorted(errors, reverse=True)]",
        [f"{G}::test_of_several_parallel_failures_the_first_item_is_named_first"],
    ),
    # --- operation-key recipe ---------------------------------------------------------------------------------
    Mutant(
        "input-hash-without-version",
        "operation key: input hash is of {system, prompt, model, version}",
        '{"system": instructions, "prompt": prompt, "model": job["model"], "version": VERSION}',
        '{"system": instructions, "prompt": prompt, "model": job["model"]}',
        [f"{G}::test_the_operation_key_and_results_hash_of_a_known_non_ascii_job_never_drift"],
    ),
    Mutant(
        "base-key-without-source",
        "operation key: base key binds the source's sha256",
        '{"job": job["jobId"], "item": item["id"], "source": item["sha256"], "input": digest}',
        '{"job": job["jobId"], "item": item["id"], "input": digest}',
        [f"{G}::test_the_operation_key_and_results_hash_of_a_known_non_ascii_job_never_drift"],
    ),
    Mutant(
        "canonical-unsorted",
        "operation key: canonical JSON sorts its keys",
        'json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)',
        'json.dumps(value, separators=(",", ":"), ensure_ascii=False)',
        [f"{G}::test_the_operation_key_and_results_hash_of_a_known_non_ascii_job_never_drift"],
    ),
    # --- bounds -----------------------------------------------------------------------------------------------
    Mutant(
        "one-call-too-many",
        "bounds: never more rows than maxModelCalls",
        '        if used >= manifest["maxModelCalls"]:',
        '        if used > manifest["maxModelCalls"]:',
        [f"{G}::test_the_call_bounds_hold_across_items_retries_and_refusals"],
    ),
    Mutant(
        "one-attempt-too-many",
        "bounds: never more attempts than maxAttemptsPerItem",
        '        if attempt > manifest["maxAttemptsPerItem"]:',
        '        if attempt > manifest["maxAttemptsPerItem"] + 1:',
        [f"{G}::test_the_call_bounds_hold_across_items_retries_and_refusals"],
    ),
    Mutant(
        "source-bound-off-by-one",
        "bounds: a source is at most 3,000 bytes",
        "    if len(data) > SOURCE_MAX_BYTES:\n        raise source_failure(name, f\"{item['path']} is {size} bytes",
        "    if len(data) >= SOURCE_MAX_BYTES:\n        raise source_failure(name, f\"{item['path']} is {size} bytes",
        [f"{G}::test_a_source_of_3000_bytes_is_accepted_and_3001_refused"],
    ),
    Mutant(
        "max-model-calls-seven",
        "bounds: maxModelCalls is 1-6 (7 for a job that drafts)",
        '    calls = MAX_MODEL_CALLS + (1 if m.get("draft") is True else 0)',
        "    calls = MAX_MODEL_CALLS + 1",
        [f"{G}::test_every_manifest_bound_is_refused_one_past_its_end"],
    ),
    Mutant(
        "concurrency-four",
        "bounds: maxConcurrentCalls is 1-3",
        'not _is_int(m["maxConcurrentCalls"], 1, 3)',
        'not _is_int(m["maxConcurrentCalls"], 1, 4)',
        [f"{G}::test_every_manifest_bound_is_refused_one_past_its_end"],
    ),
    Mutant(
        "summary-501",
        "validation: a summary is 1-500 characters",
        "not summary.strip() or len(summary) > 500:",
        "not summary.strip() or len(summary) > 501:",
        [f"{G}::test_each_answer_length_bound_holds_at_its_edge"],
    ),
    Mutant(
        "quote-201",
        "validation: a quote is at most 200 characters",
        "if not isinstance(quote, str) or len(quote) > 200:",
        "if not isinstance(quote, str) or len(quote) > 201:",
        [f"{G}::test_each_answer_length_bound_holds_at_its_edge"],
    ),
    Mutant(
        "claim-301",
        "validation: a claim is 1-300 characters",
        "not claim.strip() or len(claim) > 300:",
        "not claim.strip() or len(claim) > 301:",
        [f"{G}::test_each_answer_length_bound_holds_at_its_edge"],
    ),
    Mutant(
        "four-citations",
        "validation: 1-3 citations",
        "not 1 <= len(citations) <= 3:",
        "not 1 <= len(citations) <= 4:",
        [f"{G}::test_each_answer_length_bound_holds_at_its_edge"],
    ),
    Mutant(
        "quote-eleven",
        "validation: a quote is at least 12 characters",
        "else len(stripped) >= 12",
        "else len(stripped) >= 11",
        [f"{G}::test_each_answer_length_bound_holds_at_its_edge"],
    ),
    Mutant(
        "progress-first-600",
        "prompt: at most the last 600 characters of progress",
        'return "\\n".join(lines)[-PROGRESS_MAX_CHARS:]',
        'return "\\n".join(lines)[:PROGRESS_MAX_CHARS]',
        [f"{G}::test_the_prompt_carries_the_last_600_characters_of_validated_progress_only"],
    ),
    # --- validation rules -------------------------------------------------------------------------------------
    Mutant(
        "extra-keys-allowed",
        "validation: exactly itemId, summary, citations",
        "    if set(proposal) != set(keys):",
        "    if not set(keys) <= set(proposal):",
        [f"{G}::test_every_shape_rule_of_the_answer_is_enforced"],
    ),
    Mutant(
        "other-item-id",
        "validation: itemId is the item's",
        '    if proposal["itemId"] != item["id"]:',
        '    if not proposal["itemId"]:',
        [f"{G}::test_every_shape_rule_of_the_answer_is_enforced"],
    ),
    Mutant(
        "duplicate-keys-allowed",
        "validation: strict JSON (a duplicate key is refused)",
        "value = json.loads(data, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant)",
        "value = json.loads(data, parse_constant=_reject_constant)",
        [f"{G}::test_every_shape_rule_of_the_answer_is_enforced"],
    ),
    Mutant(
        "punctuation-quote",
        "validation: a quote is not punctuation alone",
        "    return ok_length and any(ch.isalnum() for ch in stripped)",
        "    return ok_length",
        [f"{G}::test_every_shape_rule_of_the_answer_is_enforced"],
    ),
    # --- seals ------------------------------------------------------------------------------------------------
    Mutant(
        "program-seal-skipped",
        "seals: the engine that sealed the job",
        '        if now != job["engineSha256"]:',
        '        if now != job["engineSha256"] and False:',
        [f"{G}::test_every_seal_is_checked_before_a_command_runs_reconciles_or_decides", ENGINE],
    ),
    Mutant(
        "engine-covers-the-whole-file",
        "seals: the engine ends at its mark (a release below it strands no job)",
        "        data = data[: mark + len(ENGINE_MARK) + 2] if mark >= 0 else data",
        "        data = data",
        [ENGINE],
    ),
    Mutant(
        "code-seal-of-a-job-sealed-before-skipped",
        "seals: a job sealed before the engine, by the whole program's bytes",
        '    if job.get("codeSha256") != code_sha256():',
        '    if job.get("codeSha256") != code_sha256() and False:',
        ["tests/test_upgrade.py"],
    ),
    Mutant(
        "manifest-seal-skipped",
        "seals: the manifest's bytes",
        '    if sha256_hex(raw) != job["manifestSha256"]:\n        raise SealError(\n            f"Manifest bytes changed: {path}',
        '    if sha256_hex(raw) != job["manifestSha256"] and False:\n        raise SealError(\n            f"Manifest bytes changed: {path}',
        [f"{G}::test_every_seal_is_checked_before_a_command_runs_reconciles_or_decides"],
    ),
    Mutant(
        "source-hash-skipped",
        "seals: every source's sha256",
        '    if actual != item["sha256"]:\n',
        '    if actual != item["sha256"] and False:\n',
        [f"{G}::test_every_seal_is_checked_before_a_command_runs_reconciles_or_decides"],
    ),
    Mutant(
        "dependency-seal-skipped",
        "seals: the dependency versions",
        "        if sealed.get(name) != installed.get(name):",
        "        if sealed.get(name) != installed.get(name) and False:",
        [f"{G}::test_every_seal_is_checked_before_a_command_runs_reconciles_or_decides"],
    ),
    Mutant(
        "source-not-strict-utf8",
        "seals: a source is strict UTF-8",
        '        text = data.decode("utf-8", errors="strict")',
        '        text = data.decode("utf-8", errors="replace")',
        [f"{G}::test_a_source_that_is_not_strict_utf8_is_refused_even_when_its_hash_is_sealed"],
    ),
    # --- reconcile --------------------------------------------------------------------------------------------
    Mutant(
        "reconcile-any-status",
        "reconcile: only an exact pending key",
        '        if row is None or row["status"] != "pending":\n            what = "no such operation"',
        '        if row is None:\n            what = "no such operation"',
        [f"{G}::test_reconcile_takes_only_a_pending_key_and_a_real_record"],
    ),
    Mutant(
        "reconcile-without-response-id",
        "reconcile: complete needs a response id",
        '    if not isinstance(data.get("responseId"), str) or not data["responseId"].strip():',
        '    if not isinstance(data.get("responseId", ""), str):',
        [f"{G}::test_reconcile_takes_only_a_pending_key_and_a_real_record"],
    ),
    Mutant(
        "reconcile-output-unredacted",
        "secrets: a reconciled answer is stored redacted",
        '            text, response_id = scrub(answer["outputText"], secrets), scrub(answer["responseId"], secrets)',
        '            text, response_id = answer["outputText"], scrub(answer["responseId"], secrets)',
        [f"{G}::test_reconcile_takes_only_a_pending_key_and_a_real_record"],
    ),
    # --- not-sent calls ---------------------------------------------------------------------------------------
    Mutant(
        "unsent-any-connection-error",
        "not sent: only a connection that never opened is no call",
        "    if not isinstance(exc.__cause__, connect_phase_errors()):\n        return None\n",
        "",
        [f"{G}::test_a_connection_that_never_opened_is_no_call_and_a_dropped_one_stays_pending"],
    ),
    Mutant(
        "unsent-no-event",
        "not sent: the not-sent event keeps the record",
        '        record_event(journal, key, "not-sent", detail)',
        "        pass",
        [f"{G}::test_a_connection_that_never_opened_is_no_call_and_a_dropped_one_stays_pending"],
    ),
    # --- decisions --------------------------------------------------------------------------------------------
    Mutant(
        "stale-decision-accepted",
        "decide: a decision bound to other results is refused",
        "    if bound and bound != digest:",
        "    if bound and bound == 'x':",
        [f"{G}::test_a_decision_is_bound_once_never_stale_and_never_accepts_a_failed_item"],
    ),
    Mutant(
        "accept-with-failed",
        "decide: accept needs every item validated",
        '        if decision == "accept" and failed:',
        '        if decision == "accept" and not failed and False:',
        [f"{G}::test_a_decision_is_bound_once_never_stale_and_never_accepts_a_failed_item"],
    ),
    # --- receipt and verify -----------------------------------------------------------------------------------
    Mutant(
        "receipt-without-statuses",
        "receipt: it binds every field the contract lists",
        '        "statuses": {r["itemId"]: r["status"] for r in results},\n        "endpoints": endpoints,',
        '        "endpoints": endpoints,',
        [f"{G}::test_the_receipt_holds_exactly_the_contracts_fields"],
    ),
    Mutant(
        "verify-skips-attempt-order",
        "verify: attempts are contiguous from 1",
        "        if attempts != list(range(1, len(attempts) + 1)):",
        "        if attempts != sorted(attempts):",
        [f"{G}::test_verify_names_each_kind_of_rewritten_record"],
    ),
    Mutant(
        "verify-skips-receipt-fields",
        "verify: the receipt is what the saved state gives",
        "        if receipt.get(key) != value:\n",
        "        if receipt.get(key) != value and key == 'jobId':\n",
        [f"{G}::test_verify_names_each_kind_of_rewritten_record"],
    ),
    # --- redaction and escaping ---------------------------------------------------------------------------------
    Mutant(
        "redact-escaped-spelling",
        "secrets: a secret spelled with JSON escapes is redacted",
        '    if "\\\\" not in text or not words:\n        return text\n',
        "    return text\n",
        ["tests/test_holes.py::test_a_key_the_model_spells_with_json_escapes_is_stored_and_shown_redacted"],
    ),
    Mutant(
        "page-unescaped-quote",
        "page: every slice of a source is escaped",
        "n, c, n, c, escape_text(source[start:end])))",
        "n, c, n, c, Html(source[start:end])))",
        ["tests/test_review.py::test_highlight_escapes_markup_before_between_inside_and_after_the_quotes"],
    ),
    Mutant(
        "terminal-controls-shown-raw",
        "output: control characters are escaped on a terminal",
        "        return value.translate(TERMINAL_CONTROLS)",
        "        return value",
        ["tests/test_review.py::test_model_text_cannot_drive_the_terminal"],
    ),
    # --- store addressing -------------------------------------------------------------------------------------
    Mutant(
        "public-url-keeps-password",
        "store: a password is never printed",
        "            netloc = f\"{userinfo.partition(':')[0]}@{host}\"",
        '            netloc = f"{userinfo}@{host}"',
        ["tests/test_store.py::test_no_password_in_any_output_error_or_stored_row"],
        path=STORE_PY,
    ),
    # --- the worker's claim and stop ----------------------------------------------------------------------------
    Mutant(
        "worker-ignores-stop",
        "work: a stopping worker sends no new call",
        "    if ctx.stop is not None and ctx.stop.is_set():",
        "    if ctx.stop is not None and ctx.stop.is_set() and False:",
        ["tests/test_work.py::test_sigterm_mid_call_lets_the_call_finish_sends_nothing_new_and_exits"],
    ),
    Mutant(
        # (the worker's own in-process mark of a failed job is a third guard behind the hold and needs_person: a HOLD
        # alone never reaches it, so the mutant sits where the hold is recorded)
        "worker-retries-a-held-job",
        "work: a job a worker's program is refused by (its seals) is held: no worker tries it again until a person acts",
        "            if ctx is not None or store.shared:\n                record_hold(store, ctx, job, exc)",
        "            if ctx is not None:\n                record_hold(store, ctx, job, exc)",
        [f"{G}::test_a_worker_claims_only_what_needs_no_person"],
    ),
    # --- retry bounds -----------------------------------------------------------------------------------------
    Mutant(
        "retry-past-attempts",
        "retry: within maxAttemptsPerItem, refused before anything is sent",
        '    if attempts >= manifest["maxAttemptsPerItem"]:\n        who = ',
        '    if attempts > manifest["maxAttemptsPerItem"]:\n        who = ',
        [f"{G}::test_a_retry_is_refused_at_its_bounds_before_anything_is_sent"],
    ),
    Mutant(
        "retry-after-decision",
        "retry: only at review",
        '        draft, results = review_draft(ctx, reviewer, reason, "retry")',
        '        draft, results = current_draft(ctx.journal, ctx.checkpoint()["values"]["results"])',
        [f"{G}::test_a_retry_is_refused_at_its_bounds_before_anything_is_sent"],
    ),
    # --- found by an independent fresh set (issue 25's second look); each now has its test -------------------
    Mutant(
        "calls-listed-by-key",
        "journal: calls are listed in creation order",
        'CALL_ROWS = "SELECT * FROM {calls}{where} ORDER BY created_utc, {row_order}"',
        'CALL_ROWS = "SELECT * FROM {calls}{where} ORDER BY operation_key"',
        [f"{G}::test_status_lists_calls_in_the_order_they_were_made_whatever_their_keys"],
    ),
    Mutant(
        "worker-sees-first-attempt",
        "work: only an item's latest attempt decides whether a person is needed",
        '        latest[r["base_key"]] = r["status"]\n',
        '        latest.setdefault(r["base_key"], r["status"])\n',
        [f"{G}::test_only_an_items_latest_attempt_says_whether_a_refusal_waits_for_a_person"],
    ),
    Mutant(
        "revise-citations-only-refused",
        "revise: a new citation alone is a new draft",
        'if old.get("status") == "validated" and all(old.get(k) == checked.get(k) for k in ("summary", "citations", "facts")):',
        'if old.get("status") == "validated" and old.get("summary") == checked["summary"]:',
        [f"{G}::test_a_revision_that_changes_only_the_citations_is_a_new_draft"],
    ),
    # --- who did it, and who may; evidence no one can quietly rewrite (issues 21, 22) ---------------------------
    Mutant(
        "jobs-visible-to-every-role",
        "who may: a role sees only the jobs it owns, reviews or runs as a worker",
        "CREATE POLICY reads ON durable_job.jobs FOR SELECT USING (owner = session_user::text OR session_user::text = ANY (reviewers) "
        "OR (SELECT durable_job.is_kind('worker')));",
        "CREATE POLICY reads ON durable_job.jobs FOR SELECT USING (owner = session_user::text OR session_user::text = ANY (reviewers) "
        "OR (SELECT durable_job.is_kind('person')));",
        ["tests/test_identity.py::test_carol_sees_nothing_of_alices_job_through_the_cli_or_sql"],
        path="durable_job_team/migrations/m004_policies.sql",
    ),
    Mutant(
        "signature-checked-now",
        "evidence: a signature is checked at the time its act states",
        'proc = ssh_keygen([*argv, f"-Overify-time={signature_time(when)}"], message)',
        "proc = ssh_keygen(argv, message)",
        ["tests/test_evidence.py::test_a_signed_decision_verifies_with_the_deciders_key_at_its_own_time_and_with_no_other"],
    ),
    Mutant(
        "strict-accepts-unsigned",
        "evidence: verify --strict requires a signed decision",
        "        if not signature and strict:",
        "        if not signature and strict and False:",
        ["tests/test_evidence.py::test_a_whole_consistent_rewrite_passes_only_unsigned_and_strict_verify_refuses_it"],
    ),
    Mutant(
        "receipt-link-ignores-checkpoints",
        "evidence: the receipt's link binds every checkpoint row",
        'if bound["record"].get("checkpointsSha256") != snap.store.checkpoints_digest(snap.job):',
        "if False:",
        ["tests/test_evidence.py::test_every_change_of_a_state_directory_is_named_by_verify_signed_or_not"],
    ),
    Mutant(
        "seal-link-not-compared",
        "evidence: the job record is the chain's first link",
        'if links[0]["record"] != snap.job:',
        'if links[0]["record"].get("jobId") != snap.job["jobId"]:',
        ["tests/test_evidence.py::test_every_change_of_a_signed_store_job_is_named_by_verify"],
    ),
    Mutant(
        "receipt-alone-skips-fields",
        "evidence: a receipt checked alone fails a top-level field that disagrees with its signed decision",
        "        differs = receipt_disagreements(receipt, said, head)\n",
        "        differs = []\n",
        ["tests/test_receipt_file.py::test_a_top_level_field_edited_against_the_signed_decision_fails_naming_it_and_both_values"],
    ),
    Mutant(
        "receipt-alone-covers-everything",
        "evidence: a receipt checked alone names every field its signature does not cover",
        "    unsigned = receipt_uncovered(receipt, head, signed)\n",
        "    unsigned: list = []\n",
        ["tests/test_receipt_file.py::test_a_field_no_signature_covers_is_flagged_not_covered_and_never_reported_as_verified"],
    ),
    Mutant(
        "receipt-alone-final-all-signed",
        "evidence: the keys of a receipt's final beyond the signature's fields are named as not covered",
        '        uncovered += sorted(f"{act_key(act)}.{k}" for k in record if k not in fields and k not in ("signature", "jobId"))\n',
        "",
        ["tests/test_receipt_file.py::test_a_key_added_to_the_signed_decision_beyond_its_signatures_fields_is_named_not_covered"],
    ),
    Mutant(
        "receipt-copy-over-anything",
        "inspect --receipt: never over a file but an earlier copy of the same receipt",
        "        if kept != strict_json(raw):\n",
        "        if False:\n",
        ["tests/test_receipt_file.py::test_inspect_writes_the_receipt_only_once_there_is_one_and_never_over_another_file"],
    ),
    # --- the web app (issue 23) ----------------------------------------------------------------------------------
    Mutant(
        "repeat-for-any-principal",
        "decide: only the same principal's same decision is a repeat; anyone else's is refused",
        '    said: dict[str, Any] = {"decision": decision, "reviewer": reviewer, "reason": reason, "principal": ctx.store.principal()}\n',
        '    said: dict[str, Any] = {"decision": decision, "reviewer": reviewer, "reason": reason}\n',
        ["tests/test_review.py::test_another_reviewer_saying_word_for_word_what_one_decided_is_refused"],
    ),
    Mutant(
        "repeat-by-decision-alone",
        "decide: a repeat is the same act only when the person said the same (decision, name, reason, results)",
        '    said: dict[str, Any] = {"decision": decision, "reviewer": reviewer, "reason": reason, "principal": ctx.store.principal()}\n',
        '    said: dict[str, Any] = {"decision": decision, "principal": ctx.store.principal()}\n',
        [
            "tests/test_review.py::test_a_repeated_decide_that_differs_in_anything_is_refused_and_only_the_same_one_is_answered",
            "tests/test_faults.py::test_race_decide_decide",
        ],
    ),
    Mutant(
        "empty-password-signs-in",
        "serve: a person's own password signs them in, never the server's pgpass",
        "        if not role or not password or len(role) > 63 or len(password) > 1000:",
        "        if not role or len(role) > 63 or len(password) > 1000:",
        ["tests/test_web.py::test_a_server_accounts_own_pgpass_signs_no_one_in"],
        path="durable_job_team/web.py",
    ),
    Mutant(
        "sessions-never-idle",
        "serve: an unused session is signed out",
        "        idle_seconds=idle_minutes * 60,",
        '        idle_seconds=float("inf"),',
        ["tests/test_web_hostile.py::test_a_page_kept_busy_by_the_store_keeps_no_one_signed_in"],
        path="durable_job_team/web.py",
    ),
    Mutant(
        "page-refreshes-are-a-use",
        "serve: only a person's own requests keep a session; the page's refreshes do not",
        '    own = use and request.headers.get(WEB_REFRESH_HEADER) != "1"',
        "    own = use",
        ["tests/test_web_hostile.py::test_a_page_kept_busy_by_the_store_keeps_no_one_signed_in"],
        path="durable_job_team/web.py",
    ),
    Mutant(
        "sign-in-throttle-never-refuses",
        "serve: guessed passwords are throttled per role and address, refused without asking the store",
        "    if wait:  # refused before the store is asked: no password is checked",
        "    if False:  # refused before the store is asked: no password is checked",
        ["tests/test_web_hostile.py::test_password_guessing_is_throttled_alike_for_any_role_and_the_right_password_works_again"],
        path="durable_job_team/web.py",
    ),
    Mutant(
        "every-notification-rereads",
        "serve: a NOTIFY flood re-reads each person's pages at most three times a second",
        "                if pending and now >= bumped + WEB_REREAD_SECONDS:",
        "                if pending:",
        ["tests/test_web_hostile.py::test_a_notify_flood_from_any_role_rereads_each_persons_pages_at_most_three_times_a_second"],
        path="durable_job_team/web.py",
    ),
    Mutant(
        "revise-unbound",
        "revise: an edit bound to the results shown is refused once they changed",
        '        refuse_stale(bound, results_sha256(results, written), "revise")',
        "        pass",
        ["tests/test_web.py::test_a_stale_accept_from_the_page_is_refused_and_the_new_version_shown", "tests/test_review.py"],
    ),
    Mutant(
        "sign-in-returns-anywhere",
        "serve: a sign-in returns to this app only",
        '    return value if re.fullmatch(r"/(jobs/[A-Za-z0-9._~%-]+)?", value) else "/"',
        "    return value",
        ["tests/test_web.py::test_people_sign_in_as_their_roles_and_see_and_do_only_what_they_may"],
        path="durable_job_team/web.py",
    ),
    # --- a store that lasts (issue 24) -------------------------------------------------------------------------
    Mutant(
        "prune-without-mark",
        "prune: a job is marked, keeping what readers need, before its checkpoints go",
        '            store.mark_pruned(record)\n            crash_point("after-prune-mark", job)',
        '            crash_point("after-prune-mark", job)',
        ["tests/test_lasting.py::test_a_prune_killed_at_any_point_leaves_the_job_whole_or_marked_and_the_next_prune_finishes_it"],
        path=CLI_PY,
    ),
    Mutant(
        "pruned-job-resumes",
        "prune: nothing runs a pruned job again",
        "            if pruned is not None:\n                raise DecisionError(",
        "            if pruned is not None and False:\n                raise DecisionError(",
        ["tests/test_lasting.py::test_prune_of_a_state_directory_frees_its_checkpoints_and_keeps_it_answerable"],
    ),
    Mutant(
        "tombstone-not-consulted",
        "delete: a deleted job's id stays taken, and says so",
        '        if rights["gone"]:',
        "        if False:",
        ["tests/test_lasting.py::test_delete_is_the_administrators_and_its_tombstone_keeps_the_job_id_taken"],
        path=STORE_PY,
    ),
    Mutant(
        "journal-writes-without-its-lock",
        "store: a writer whose lock's connection is gone writes nothing more",
        '        self.send("BEGIN", [], [])\n        self.check_lock(queued=True)\n',
        '        self.send("BEGIN", [], [])\n',
        ["tests/test_store.py::test_a_lost_lock_refuses_the_answer_that_arrives_after_it"],
        path=STORE_PY,
    ),
    Mutant(
        "checkpoints-written-without-the-lock",
        "store: a lost lock aborts a checkpoint write in its own transaction",
        "                        conn.execute(LOCK_CHECK, journal.lock_check())\n",
        "",
        ["tests/test_store.py::test_a_lost_lock_aborts_a_checkpoint_write_in_its_own_transaction"],
        path=STORE_PY,
    ),
    Mutant(
        "pipelined-answer-unchecked",
        "store: an answer sent without waiting for its count still writes nothing when its row is no longer pending",
        "            self.run(CHANGED_ONE.format(statement=template), params, answer=False)\n",
        "            self.run(template, params, answer=False)\n",
        ["tests/test_store.py::test_an_answer_for_a_call_changed_meanwhile_is_refused_whole_though_nothing_waited_for_its_update"],
        path=STORE_PY,
    ),
    Mutant(
        "pipelined-rollback-as-sql",
        "store: a pipelined writer's rollback leaves no prepared statement the next statements rely on gone",
        "            self.conn.rollback()\n",
        '            self.execute("ROLLBACK", [], [])\n',
        ["tests/test_store.py::test_an_item_out_of_attempts_is_reviewed_as_failed_and_the_job_goes_on_under_the_pipelined_writer"],
        path=STORE_PY,
    ),
    Mutant(
        "migrate-while-held",
        "upgrades: migrate waits for a drained store",
        "        refuse_while_held(store, db)\n",
        "",
        ["tests/test_store.py::test_an_upgrade_waits_for_a_drained_store_migrate_naming_the_held_job"],
        path=STORE_PY,
    ),
    Mutant(
        "every-job-acts-here",
        "upgrades: jobs names the jobs another program sealed",
        "        check_program_seals(job)\n    except SealError:\n        return False",
        "        pass\n    except SealError:\n        return False",
        ["tests/test_lasting.py::test_jobs_names_the_jobs_another_program_sealed_for_it_to_finish"],
        path=CLI_PY,
    ),
    # --- issue 30: hostile roles ----------------------------------------------------------------------------
    Mutant(
        "is-admin-search-path-removed",
        "store: no granted role becomes the administrator by shadowing the catalog",
        # is_admin as m016_floor last wrote it (m011's definition is replaced there, so a mutant of m011's changes nothing)
        "is_admin() RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN (SELECT session_user = "
        "pg_catalog.pg_get_userbyid(n.nspowner) OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) "
        "FROM pg_catalog.pg_namespace n WHERE",
        "is_admin() RETURNS boolean LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN (SELECT session_user = "
        "pg_get_userbyid(n.nspowner) OR (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user) "
        "FROM pg_namespace n WHERE",
        [
            "tests/test_hostile.py::test_every_function_of_the_store_has_a_fixed_search_path_and_no_trigger_is_anyones_to_call",
            "tests/test_hostile.py::test_shadowing_the_catalog_makes_no_role_the_administrator",
        ],
        path="durable_job_team/migrations/m016_floor.sql",
    ),
    Mutant(
        "receipt-before-any-decision",
        "store: a receipt is the last act of a decided or cancelled job",
        "IF NOT FOUND THEN RAISE EXCEPTION 'durable_job.receipts: job % has no decision or cancel recorded: no receipt yet', NEW.job_id "
        "USING ERRCODE = 'check_violation'; END IF; ",
        "IF NOT FOUND THEN RETURN NEW; END IF; ",
        ["tests/test_hostile.py::test_a_receipt_copied_from_another_job_or_planted_before_a_decision_is_refused"],
        path="durable_job_team/migrations/m023_engine_seal.sql",  # m023 replaced m011's receipt check: its text is the one that runs
    ),
    Mutant(
        "finished-history-open",
        "store: a finished job's history takes nothing more but from the administrator",
        "IF ended IS NULL THEN RETURN NEW; END IF; ",
        "IF true THEN RETURN NEW; END IF; ",
        ["tests/test_hostile.py::test_a_finished_jobs_history_takes_nothing_more_from_any_role_and_still_verifies"],
        path=M011,
    ),
    Mutant(
        "migrate-advisory-lock",
        "store: no role without grants delays migrate",
        '                lock.execute("LOCK TABLE durable_job.migrate_lock IN EXCLUSIVE MODE NOWAIT")\n',
        '                lock.execute("ROLLBACK")\n'
        '                if not lock.execute("SELECT pg_try_advisory_lock(x\'6475726A6F627331\'::bigint) AS t").fetchone()["t"]:\n'
        '                    raise psycopg.errors.LockNotAvailable("held")\n',
        ["tests/test_hostile.py::test_no_role_without_grants_delays_migrate_by_squatting_a_lock"],
        path=STORE_PY,
    ),
    Mutant(
        "lost-journal-of-a-finished-job",
        "state directory: a finished job whose journal (and checkpoints) is lost is named, and nothing runs again",
        "    if not size(effects) and (size(checkpoints) or os.path.exists(receipt)):\n",
        "    if not size(effects) and size(checkpoints):\n",
        ["tests/test_bad_input.py::test_a_finished_jobs_lost_journal_is_named_and_nothing_runs_again"],
    ),
    Mutant(
        "prune-leaves-the-rows",
        "prune: a state directory's job's checkpoints are removed from the journal's file, their space given back",
        '            self.checkpointer(conn).delete_thread(job["threadId"])\n',
        "            pass\n",
        ["tests/test_lasting.py::test_prune_of_a_state_directory_frees_its_checkpoints_and_keeps_it_answerable"],
    ),
    Mutant(
        "rotated-out-key-encrypts",
        "encryption at rest: a new job is encrypted only under the store's current key; a rotated-out one is refused at submit and start",
        '        if keys["retired"] is not None:\n',
        '        if keys["retired"] is not None and False:\n',
        ["tests/test_keys_and_scale.py::test_a_rotated_out_key_encrypts_no_new_job_and_a_job_left_under_it_is_held_with_the_true_fix"],
        path=STORE_PY,
    ),
    # --- receipts (issue 43) ----------------------------------------------------------------------------------------
    Mutant(
        "strict-ignores-uncovered",
        "verify --receipt FILE --strict: a field no signature covers fails when it says other than the signed act implies",
        "    implied = receipt_implied(receipt, signed[0], unsigned) if strict and signed else []\n",
        "    implied = []\n",
        [
            "tests/test_receipt_attacker.py::test_a_new_receipt_leaves_only_what_is_written_after_the_act_and_strict_holds_each_to_it",
            "tests/test_receipt_attacker.py::test_a_receipt_signed_before_still_verifies_and_strict_fails_only_what_its_record_contradicts",
        ],
    ),
    # --- notifications from stamped facts (issue 43) ----------------------------------------------------------------
    Mutant(
        "notify-sends-stored-payload",
        "notify: an event is rebuilt at send time from the row's stamped columns and its job's rows, never the payload's text",
        '    if config["webUrl"]:\n        document["link"] = ',
        '    document = {**document, **payload}\n    if config["webUrl"]:\n        document["link"] = ',
        [
            "tests/test_outbox_attacker.py::test_forged_outbox_rows_from_each_role_are_refused_or_sent_only_with_what_the_store_stamped",
            "tests/test_outbox_attacker.py::test_a_state_directorys_poisoned_outbox_is_set_aside_and_its_events_rebuilt_from_the_job",
        ],
        path="durable_job_team/notify.py",
    ),
    Mutant(
        "passkey-origin-from-record",
        "verify --allowed-passkeys: a passkey assertion is checked at the origin its line names, never the record's own",
        "    origin = passkey_origin(key)\n",
        '    origin = signature.get("origin") or passkey_origin(key)\n',
        ["tests/test_passkey_attacker.py::test_an_assertion_made_elsewhere_a_time_moved_or_a_cloned_authenticator_never_verifies"],
    ),
    # --- serve against a page on another port (issue 43) -----------------------------------------------------------
    Mutant(
        "csrf-token-any-session",
        "serve: a state-changing request carries the token kept in the person's own session",
        "        if not (isinstance(kept, str) and sent and hmac.compare_digest(sent.encode(), kept.encode())):",
        "        if not (isinstance(kept, str) and sent):",
        [
            "tests/test_web_attacker.py::test_a_token_from_another_session_is_refused_even_with_its_cookie_tossed_in",
            "tests/test_web_attacker.py::test_a_sign_in_form_from_another_origin_or_another_session_signs_no_one_in",
        ],
        path="durable_job_team/web.py",
    ),
    Mutant(
        "origin-unchecked",
        "serve: a state-changing request is refused unless it comes from serve's own origin",
        "        if not same_origin(scope, headers):",
        "        if False:",
        [
            "tests/test_web_attacker.py::test_a_post_from_another_origin_is_refused_even_with_the_persons_own_token",
            "tests/test_web_attacker.py::test_a_page_on_another_port_cannot_decide_in_bobs_browser",
        ],
        path="durable_job_team/web.py",
    ),
    Mutant(
        "opaque-origin-trusted",
        "serve: an opaque Origin (null) counts only with the browser's Sec-Fetch-Site: same-origin",
        '    if origin is None or origin == "null":\n        return headers.get("sec-fetch-site") == "same-origin"',
        '    if origin is None or origin == "null":\n        return True',
        ["tests/test_web_attacker.py::test_a_post_from_another_origin_is_refused_even_with_the_persons_own_token"],
        path="durable_job_team/web.py",
    ),
    # --- the request: a question and its asked facts -------------------------------------------------------------
    Mutant(
        "fact-value-outside-its-quote",
        "the request: a stated fact's value is what its own quote states",
        "    return any(key[0] in FACT_FIGURES[kind] for key in stated) and all(key in quoted for key in stated)",
        "    return any(key[0] in FACT_FIGURES[kind] for key in stated)",
        [f"{REQUEST}::test_an_invented_fact_fails_its_item_before_anything_is_saved_as_validated"],
    ),
    Mutant(
        "asked-facts-unchecked",
        "the request: an answer states every asked fact, and no other",
        '    return None if asked is None else facts_problem(proposal["facts"], asked["facts"], source)',
        "    return None",
        [f"{REQUEST}::test_a_fact_the_model_leaves_out_or_adds_fails_its_item"],
    ),
    Mutant(
        "not-stated-unflagged",
        "the request: a fact said not stated while the source holds one of its kind is flagged, with where",
        '        if held:\n            result["inSource"] = held[:3]',
        '        if False:\n            result["inSource"] = held[:3]',
        [f"{REQUEST}::test_a_fact_said_not_stated_while_the_source_holds_one_of_its_kind_is_flagged_with_where"],
    ),
    Mutant(
        "not-stated-note-left-out",
        "the request: the program writes the not-stated note of every fact no item states",
        '            notes.append(entry["note"])',
        "            pass",
        [f"{REQUEST}::test_a_question_is_answered_with_the_day_quoted_and_the_time_said_to_be_not_stated"],
    ),
    # --- the writer: a draft answer from the checked evidence -----------------------------------------------------
    Mutant(
        "writer-sees-a-source",
        "the writer: its input is the question, the asked facts and the validated evidence, never a source's text",
        "        item, prompt = writer_item(bundle), writer_input(bundle)",
        '        item, prompt = writer_item(bundle), writer_input(bundle) + "".join(ctx.sources.values())',
        [f"{WRITER}::test_the_writer_is_sent_the_quotes_and_no_sentence_of_a_source_that_is_not_a_quote"],
    ),
    Mutant(
        "not-stated-note-left-to-the-model",
        "the writer: the program appends the note of every fact not stated, never the model",
        "    notes = writer_notes(bundle)\n    problem: str | None",
        "    notes: list = []\n    problem: str | None",
        [f"{WRITER}::test_the_pottery_job_drafts_the_day_with_its_quote_and_the_program_notes_the_time"],
    ),
    Mutant(
        "writer-cites-an-unknown-id",
        "the writer: every evidence id a sentence cites is one of the validated evidence",
        "        unknown = [e for e in cited if e not in quotes]",
        "        unknown: list = []",
        [f"{WRITER}::test_a_writer_citing_an_id_that_does_not_exist_fails_the_draft_which_is_reviewed_like_a_failed_item"],
    ),
    Mutant(
        "writer-retry-unchecked",
        "the writer: a retried writer's answer is checked as the writer's before it replaces the failed draft",
        '    checked = check_draft(output_text, bundle, must_quote=validation_rules(ctx.job, ctx.manifest)["must_quote"])',
        '    checked = {**check_draft(output_text, bundle, must_quote=validation_rules(ctx.job, ctx.manifest)["must_quote"]), "status": "validated"}',
        [f"{WRITER}::test_a_second_failed_draft_stays_failed_and_retry_draft_is_refused_once_the_writers_attempts_are_spent"],
    ),
    Mutant(
        "sentence-check-unrecorded",
        "checks: decide --checked records which sentences of the draft answer the person checked",
        "[i for i in kinds[kind] if i in said], len(kinds[kind])",
        '[i for i in kinds[kind] if i in said and kind != "sentences"], len(kinds[kind])',
        [
            "tests/test_checked.py::test_a_drafting_jobs_checks_record_its_sentences_and_facts_and_verify_and_the_receipt_count_them",
            "tests/test_web_checked.py::test_bob_ticks_a_sentence_and_a_fact_of_the_draft_answer_on_his_phone_and_the_record_says_so",
        ],
    ),
    Mutant(
        "revised-draft-unvalidated",
        "the writer: revise --draft's file is validated as the writer's output before it becomes a draft",
        '        if checked["status"] != "validated":\n            why = str(checked["reason"]).replace(',
        '        if False:\n            why = str(checked["reason"]).replace(',
        [f"{WRITER}::test_every_bad_draft_file_is_a_hold_naming_what_is_wrong_and_records_nothing"],
    ),
    # --- providers (issue 48) -----------------------------------------------------------------------------------
    Mutant(
        "rate-limit-spends-an-attempt",
        "providers: a rate-limited request spends no attempt and no call",
        "    if seconds is not None:\n        raise forget_rate_limited_call(",
        "    if False:\n        raise forget_rate_limited_call(",
        ["tests/test_rate_limits.py::test_a_three_item_job_rate_limited_three_times_reaches_review_with_no_attempt_spent"],
    ),
    Mutant(
        "rate-limit-wait-unbounded",
        "providers: a job waits for a rate-limiting provider only within maxRateLimitWaitSeconds",
        "    if asked > bound:",
        "    if False:",
        ["tests/test_rate_limits.py::test_waits_past_the_jobs_bound_stop_the_run_with_nothing_spent_and_resume_goes_on"],
    ),
    Mutant(
        "chat-request-stored",
        "providers: a Chat Completions request is sent with store=False",
        "        store=False,\n    )\n    kwargs[api[",
        "        store=True,\n    )\n    kwargs[api[",
        ["tests/test_chat.py::test_a_chat_job_reaches_review_with_one_chat_request_per_item_and_verifies"],
    ),  # --- the provider keeps the record (issue 49) ----------------------------------------------------------------
    Mutant(
        "id-committed-after-polling",
        "providers: a kept call's response id is committed as soon as the provider answers the POST, before its answer is awaited",
        '    if on_submitted is not None:\n        on_submitted(response.id)\n    return kept_answer(client, response, timeout, getattr(response, "_request_id", None))',
        '    answer = kept_answer(client, response, timeout, getattr(response, "_request_id", None))\n    if on_submitted is not None:\n        on_submitted(response.id)\n    return answer',
        [
            "tests/test_provider_record.py::test_an_answer_not_back_in_time_stays_submitted_and_resume_retrieves_it",
            "tests/test_provider_record.py::test_a_run_killed_after_the_id_is_committed_is_completed_by_resume_from_the_provider_record",
        ],
    ),
    Mutant(
        "lookup-takes-the-first-of-two",
        "providers: a kept chat call found twice at the provider is not taken from either (one request a key is broken)",
        "    if len(found) > 1:\n        raise StateError(",
        "    if False:\n        raise StateError(",
        ["tests/test_provider_record.py::test_two_stored_completions_under_one_key_stop_the_run_and_none_is_taken"],
    ),
    Mutant(
        "phone-reconcile-without-the-lock",
        "providers: an uncertain call settled from the page takes the job's lock, so nothing is recorded over a run holding "
        "the job (it may be completing that call), and a second tap is answered by the first record",
        "        self.lock = self.store.lock(self.command)\n",
        '        self.lock = contextlib.nullcontext() if self.command == "reconcile" else self.store.lock(self.command)\n',
        [
            "tests/test_phone_reconcile.py::"
            "test_a_reconcile_from_the_page_waits_for_the_command_holding_the_job_and_two_taps_record_it_once",
        ],
    ),
    Mutant(
        "lookup-recorded-before-the-tap",
        "providers: a phone's lookup records nothing until the person signs it (one act with the reconcile it completes)",
        "    if len(found) != 1 and not prepare:\n",
        "    if len(found) != 1 or prepare:\n",
        [
            "tests/test_phone_reconcile.py::"
            "test_bob_looks_an_uncertain_call_up_at_the_provider_that_kept_its_record_and_signs_what_it_found",
        ],
    ),
    # --- a revised job reuses only what it may (issue 50) -----------------------------------------------------------
    Mutant(
        "reuse-compares-the-progress",
        "fork: an item's answer is reused by what it was sent apart from the progress line, which changes with other items",
        "    if end >= 0:\n        prompt = prompt[: start + len(PROGRESS_HEAD)] + REUSE_PLACEHOLDER + prompt[end:]\n",
        "    if False:\n        prompt = prompt[: start + len(PROGRESS_HEAD)] + REUSE_PLACEHOLDER + prompt[end:]\n",
        ["tests/test_fork.py::test_progress_is_left_out_of_what_reuse_compares_so_calls_made_at_once_are_reused_one_by_one"],
    ),
    Mutant(
        "fork-reuses-a-hand-reconciled-answer",
        "fork: only the provider's own answer is reused, never one a person reconciled by hand",
        '        row["status"] == "completed" and not row.get("reconciliation_json") and bool(row["response_id"])',
        '        row["status"] == "completed" and bool(row["response_id"])',
        ["tests/test_fork.py::test_abandoned_and_hand_reconciled_answers_are_never_reused_their_items_are_called_again"],
    ),
    Mutant(
        "fork-verify-trusts-a-changed-old-row",
        "fork: verify fails a reused answer whose row in the old job was changed",
        '                    or sha256_hex(answer.encode("utf-8")) != r["answerSha256"]\n',
        "                    or False\n",
        ["tests/test_fork.py::test_verify_checks_each_reused_answer_against_the_old_journal_and_says_plainly_when_it_is_not_at_hand"],
    ),
    # --- traces: the engine's spans through the OpenTelemetry API (issue 35; issue 46 closed the engine) -------------
    Mutant(
        "span-status-quotes-the-error",
        "traces: a failed span names its error's type alone (a message could quote a source)",
        "current.set_status(Status(StatusCode.ERROR, type(exc).__name__))",
        "current.set_status(Status(StatusCode.ERROR, str(exc)))",
        ["tests/test_traces.py::test_a_call_never_sent_and_no_endpoint_at_all"],
    ),
    Mutant(
        "span-records-the-exception",
        "traces: a failed span has no exception event (its message could quote a source)",
        "traced.start_as_current_span(name, record_exception=False, set_status_on_exception=False)",
        "traced.start_as_current_span(name, record_exception=True, set_status_on_exception=False)",
        ["tests/test_traces.py::test_a_call_never_sent_and_no_endpoint_at_all"],
    ),
    Mutant(
        "traces-without-a-variable",
        "traces: with no OTEL_EXPORTER_OTLP_* variable nothing of OpenTelemetry is imported",
        '    return any(name.startswith("OTEL_EXPORTER_OTLP_") for name in os.environ)\n',
        "    return True\n",
        ["tests/test_traces.py::test_a_call_never_sent_and_no_endpoint_at_all"],
    ),
    # --- issue 46: a command reads its job's calls, drafts and cancel once, and again only after a run may write them ---
    Mutant(
        "job-rows-read-per-check",
        "decide/resume: the job's calls, drafts and cancel are read once a command, under its lock",
        "        if self.found is None:\n            self.found = job_rows(self.journal)\n        return self.found\n",
        "        return job_rows(self.journal)\n",
        [f"{ENGINE}::test_decide_reads_its_jobs_calls_and_drafts_once"],
    ),
    Mutant(
        "decision-run-rereads-rows",
        "decide/resume: a run that resumes the review node alone keeps the rows its command read",
        '    at_review = resume_value is not None or (not fresh and ctx.checkpoint()["waiting"])',
        "    at_review = False",
        [f"{ENGINE}::test_decide_reads_its_jobs_calls_and_drafts_once"],
    ),
    Mutant(
        "run-keeps-rows-it-wrote",
        "resume: the rows read before a run that may call the model are read again after it",
        "        if not at_review:\n            self.found = None\n",
        "        if False:\n            self.found = None\n",
        [f"{ENGINE}::test_a_resume_answers_from_the_calls_its_own_run_made"],
    ),
    Mutant(
        "any-resume-kept-as-at-review",
        "resume: only a run of a thread waiting at review (the review's node alone) keeps the rows read before it",
        '    at_review = resume_value is not None or (not fresh and ctx.checkpoint()["waiting"])',
        "    at_review = resume_value is not None or not fresh",
        [f"{ENGINE}::test_a_resume_answers_from_the_calls_its_own_run_made"],
    ),
    Mutant(
        "inspect-reads-drafts-twice",
        "inspect: the latest draft, the draft answer and the history from one read of the drafts",
        "    snap = read_snapshot(store, every_draft=True)\n",
        "    snap = read_snapshot(store)\n",
        [f"{ENGINE}::test_decide_reads_its_jobs_calls_and_drafts_once"],
    ),
]
