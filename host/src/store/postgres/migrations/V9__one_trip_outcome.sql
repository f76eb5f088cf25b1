-- Schema 9: a claim's outcome in one statement. Schema 8 ended the claim
-- in one (`gatehouse_finish`), then the host kept the result and pruned the
-- chat in two more, each a round trip. `gatehouse_outcome` does the three
-- in one call and says whether the ledger took this outcome, so the host
-- does not read the action back to find out.

-- End the claim of `p_id` (`claims::applied`, `claims::failed` and
-- `record_outcome`, as `actions::finish_in`): its state, its decision's
-- outcome and the announcement, which stand or fall together. `p_outcome`
-- is 'applied' or 'failed'; for a failure, `p_message` and `p_retryable`.
-- The state moves only from `applying` (a claim failed meanwhile by a
-- recovery stays failed, P3); the outcome is recorded either way.
--
-- Then, for an applied action, its result (`p_result`; a covered workflow
-- call keeps none, G7), and the chat's finished actions beyond the newest
-- `p_retained` pruned (P5). Those come after the state and in a block of
-- their own: when either cannot be written, the state still stands
-- (P2: the state is written first, then the result) and the server logs
-- why.
--
-- True when this call moved the state, that is, when the ledger records
-- this outcome.
CREATE FUNCTION gatehouse_outcome(
    p_id BIGINT, p_outcome TEXT, p_message TEXT, p_retryable BIGINT, p_now BIGINT,
    p_channel TEXT, p_result TEXT, p_retained BIGINT
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    v_recorded BOOLEAN;
BEGIN
    IF p_outcome = 'applied' THEN
        UPDATE ledger SET state = 'applied', finished_at = p_now, claim_owner = NULL
         WHERE id = p_id AND state = 'applying';
    ELSE
        UPDATE ledger SET state = 'failed', retryable = p_retryable, finished_at = p_now,
               claim_owner = NULL,
               error = CASE WHEN logical_key IS NULL THEN p_message
                 ELSE 'the workflow call failed; its message was handed to its step and not kept' END
         WHERE id = p_id AND state = 'applying';
    END IF;
    v_recorded := FOUND;
    PERFORM pg_notify(p_channel, json_build_object('action', id, 'chat', chat)::text)
       FROM ledger WHERE id = p_id;
    UPDATE decisions SET outcome = p_outcome
     WHERE id = (SELECT max(id) FROM decisions WHERE action = p_id) AND outcome IS NULL;
    BEGIN
        IF p_result IS NOT NULL THEN
            UPDATE ledger SET result = CASE WHEN logical_key IS NULL THEN p_result
                ELSE '{"note":"the result of a workflow call is handed to its step and not kept"}' END
             WHERE id = p_id;
        END IF;
        PERFORM gatehouse_prune((SELECT chat FROM ledger WHERE id = p_id), p_retained);
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'action %: its result was not kept or its chat not pruned: %', p_id, SQLERRM;
    END;
    RETURN v_recorded;
END
$$;

-- Replaced by `gatehouse_outcome`; a host of an older schema does not open
-- this one (it refuses a newer schema), so nothing calls it.
DROP FUNCTION gatehouse_finish(BIGINT, TEXT, TEXT, BIGINT, BIGINT, TEXT);
