-- Schema 8: the stage, the claim and the outcome, each one statement the
-- host sends in one round trip (no BEGIN, no COMMIT: a single statement is
-- its own transaction, durable at its commit). On a shared database a
-- stage was about a dozen statements, each a round trip on the wire, where
-- the embedded file makes library calls; the rules are the ones the
-- store's statements spell (stages.rs, claims.rs, actions.rs), and the
-- store's suites hold both engines to the same answers. Every constant
-- (the cap, the default expiry, the retention, the channel) is an argument:
-- the host keeps the one spelling of each. No function decides who may
-- stage or claim: the host checked that before it calls.

-- Admit and insert one pending action (SPEC A3, A5, H3, O3), as
-- `stages::admit` and `stages::insert` do in a transaction. Refused:
-- `refused` says why ('no-chat', 'policy-moved', 'latched', 'full', with
-- the open count in `n`) and nothing was written. Staged: `refused` is
-- NULL and `n` is the new action's id.
--
-- Admission is asked twice: first without the chat's row lock, so that a
-- gadget hammering a full (or latched) chat holds up no stager of it;
-- then under the lock, in a statement of its own, since a statement that
-- waited for a row lock still reads from the snapshot it took before it
-- waited. Each statement of a (volatile) function under READ COMMITTED
-- takes a snapshot of its own, so the second count sees what the stager
-- before it inserted. The policy epoch is asked first, so every other
-- answer is given under the policy the stage was checked on.
CREATE FUNCTION gatehouse_stage(
    p_chat TEXT, p_tag TEXT, p_resolved_at BIGINT, p_cap BIGINT,
    p_default_expiry BIGINT, p_retained BIGINT, p_now BIGINT, p_channel TEXT,
    p_caller TEXT, p_person TEXT, p_gadget TEXT, p_key TEXT, p_gatekeeper TEXT,
    p_tool TEXT, p_classified_by TEXT, p_trust TEXT, p_args TEXT,
    p_args_digest TEXT, p_await BIGINT, p_provisional TEXT, p_facts TEXT,
    p_account TEXT, p_hook BIGINT,
    OUT refused TEXT, OUT n BIGINT
) LANGUAGE plpgsql AS $$
DECLARE
    v_latched BIGINT;
    v_open BIGINT;
    v_due BIGINT;
    v_epoch BIGINT;
    v_expired BIGINT;
BEGIN
    FOR pass IN 1..2 LOOP
        IF pass = 2 THEN
            PERFORM 1 FROM chats WHERE name = p_chat FOR UPDATE;
        END IF;
        SELECT c.latched,
               o.live - o.due + (SELECT count(*) FROM ledger
                                  WHERE chat = p_chat AND state = 'applying'),
               o.due,
               (SELECT e.n FROM policy_epoch e WHERE e.id = 1)
          INTO v_latched, v_open, v_due, v_epoch
          FROM chats c,
               (SELECT count(*) AS live,
                       count(*) FILTER (WHERE created_at <= p_now - COALESCE(
                         (SELECT expire_after_ms FROM chats WHERE name = p_chat),
                         p_default_expiry)) AS due
                  FROM ledger
                 WHERE chat = p_chat AND state = 'pending') o
         WHERE c.name = p_chat;
        IF NOT FOUND THEN
            refused := 'no-chat';
            RETURN;
        END IF;
        IF p_resolved_at IS NOT NULL AND p_resolved_at <> v_epoch THEN
            refused := 'policy-moved';
            RETURN;
        END IF;
        IF v_latched = 1 THEN
            refused := 'latched';
            RETURN;
        END IF;
        IF v_open >= p_cap THEN
            refused := 'full';
            n := v_open;
            RETURN;
        END IF;
    END LOOP;
    -- What expired is closed (H3): marked, so the gadget sees it too, and
    -- the chat's retention kept. The count above already left it out.
    IF v_due > 0 THEN
        UPDATE ledger SET state = 'expired', finished_at = p_now, claim_owner = NULL
         WHERE chat = p_chat AND kind = 'action' AND state = 'pending'
           AND created_at <= p_now - COALESCE(
                 (SELECT expire_after_ms FROM chats WHERE name = p_chat), p_default_expiry);
        GET DIAGNOSTICS v_expired = ROW_COUNT;
        IF v_expired > 0 THEN
            PERFORM gatehouse_prune(p_chat, p_retained);
        END IF;
    END IF;
    INSERT INTO ledger (chat, kind, caller, person, gadget, intro_key, gatekeeper, tool,
        classified_by, trust, args, args_digest, state, await_decision, provisional, facts,
        account, created_at, hook)
    VALUES (p_chat, 'action', p_caller, p_person, p_gadget, p_key, p_gatekeeper, p_tool,
        p_classified_by, p_trust, p_args, p_args_digest, 'pending', p_await, p_provisional,
        p_facts, p_account, p_now, p_hook)
    RETURNING id INTO n;
    -- Other hosts' inboxes show it without polling (at the commit).
    PERFORM pg_notify(p_channel, json_build_object('action', n, 'chat', p_chat)::text);
END
$$;

-- Keep the newest `p_retained` finished actions of `p_chat`; never an open
-- one (SPEC P5), as `stages::prune`. The number deleted.
CREATE FUNCTION gatehouse_prune(p_chat TEXT, p_retained BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_pruned BIGINT;
BEGIN
    DELETE FROM ledger WHERE chat = p_chat AND kind = 'action'
       AND state IN ('applied', 'failed', 'rejected', 'expired')
       AND id NOT IN (SELECT id FROM ledger WHERE chat = p_chat AND kind = 'action'
                        AND state IN ('applied', 'failed', 'rejected', 'expired')
                      ORDER BY id DESC LIMIT p_retained);
    GET DIAGNOSTICS v_pruned = ROW_COUNT;
    RETURN v_pruned;
END
$$;

-- Take action `p_id` for sending (SPEC P1): the claim's one conditional
-- update (`claims::take`), its announcement and its decision's record
-- (`record_decision`), which stand or fall together. The row as it is
-- now when this call took it; no row when it was not claimable any more
-- (another claimer, a rejection, an expiry got there first): of any
-- number of callers on any number of hosts, exactly one gets a row,
-- since READ COMMITTED checks the WHERE clause again on the row a
-- concurrent claimer just changed.
CREATE FUNCTION gatehouse_claim(
    p_id BIGINT, p_owner TEXT, p_by TEXT, p_auto BIGINT, p_now BIGINT,
    p_decision TEXT, p_args_digest TEXT, p_channel TEXT
) RETURNS SETOF ledger LANGUAGE plpgsql AS $$
DECLARE
    r ledger;
BEGIN
    UPDATE ledger SET state = 'applying', claim_owner = p_owner, resolved_by = p_by,
           auto_approved = p_auto, decided_at = p_now, error = NULL, retryable = NULL
     WHERE id = p_id AND kind = 'action'
       AND (state = 'pending' OR (state = 'failed' AND retryable = 1))
    RETURNING * INTO r;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_notify(p_channel, json_build_object('action', r.id, 'chat', r.chat)::text);
    INSERT INTO decisions (action, chat, gatekeeper, tool, decision, by, args_digest, outcome, at)
    VALUES (r.id, r.chat, r.gatekeeper, r.tool, p_decision, p_by, p_args_digest, NULL, p_now);
    RETURN NEXT r;
END
$$;

-- The claim of `p_id` ended (`claims::applied`, `claims::failed` and
-- `record_outcome`, as `actions::finish_in`): its state, its decision's
-- outcome and the announcement, in one commit. `p_outcome` is 'applied'
-- or 'failed', the one word for both the state it ends in and the
-- outcome; for a failure, `p_message` and `p_retryable`. The state moves
-- only from `applying` (a claim failed meanwhile by a recovery stays
-- failed, P3); the outcome is recorded either way, as the host's
-- transaction did.
CREATE FUNCTION gatehouse_finish(
    p_id BIGINT, p_outcome TEXT, p_message TEXT, p_retryable BIGINT, p_now BIGINT,
    p_channel TEXT
) RETURNS VOID LANGUAGE plpgsql AS $$
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
    PERFORM pg_notify(p_channel, json_build_object('action', id, 'chat', chat)::text)
       FROM ledger WHERE id = p_id;
    UPDATE decisions SET outcome = p_outcome
     WHERE id = (SELECT max(id) FROM decisions WHERE action = p_id) AND outcome IS NULL;
END
$$;
