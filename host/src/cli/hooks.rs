//! The `hook` and `hooks` commands' words. Every rule is the kernel's
//! (`crate::hooks`, through the one authorization rule).

use crate::kernel::Kernel;
use crate::prompt::inline;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum HookCmd {
    /// Bind a gatekeeper's trigger to a gadget in a chat. The hook is
    /// disabled until a person who may decide in the chat enables it. For a
    /// webhook, its URL and signing secret are printed once.
    Add {
        chat: String,
        /// The gatekeeper (introduced into the chat) that declares the trigger.
        #[arg(long)]
        gatekeeper: String,
        /// The trigger's name, as the gatekeeper declares it.
        #[arg(long)]
        trigger: String,
        /// The gadget each firing runs; its input is the event.
        #[arg(long)]
        gadget: String,
        /// A schedule's period in seconds (default: the trigger's own).
        #[arg(long, value_name = "SECONDS")]
        every: Option<u32>,
        /// The inbox's address for the printed URL (default: the running
        /// `serve`'s, else http://127.0.0.1:8337).
        #[arg(long)]
        url: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show a hook as the person enabling it sees it, with its firings.
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Enable a hook (it is shown first): its turns run for you, with your
    /// accounts, and every write they stage waits for a decision.
    Enable {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Disable a hook: nothing fires until it is enabled again.
    Disable {
        id: i64,
        #[arg(long)]
        json: bool,
    },
}

pub async fn execute(
    kernel: &Kernel,
    cmd: HookCmd,
    me: &str,
    inbox: impl FnOnce(Option<String>) -> String,
) -> anyhow::Result<()> {
    match cmd {
        HookCmd::Add {
            chat,
            gatekeeper,
            trigger,
            gadget,
            every,
            url,
            json,
        } => {
            let added = kernel
                .person(me)
                .add_hook(&chat, &gatekeeper, &trigger, &gadget, every)
                .await?;
            let address = added.path.as_ref().map(|p| format!("{}{p}", inbox(url)));
            if json {
                let mut v = serde_json::to_value(&added)?;
                v["url"] = serde_json::json!(address);
                return super::print_json(&v);
            }
            print_added(&added, address);
        }
        HookCmd::Show { id, json } => show(kernel, me, id, json).await?,
        HookCmd::Enable { id, json } => enable(kernel, me, id, json).await?,
        HookCmd::Disable { id, json } => {
            let h = kernel.person(me).set_hook_enabled(id, false, None).await?;
            super::print_record(&h, json, |h| {
                outln!(
                    "disabled hook {}: nothing fires until it is enabled again",
                    h.id
                )
            })?;
        }
    }
    Ok(())
}

/// `hook add`'s text: the hook, and a webhook's URL and secret, once.
fn print_added(added: &crate::hooks::AddedHook, address: Option<String>) {
    let h = &added.hook;
    outln!(
        "added hook {} in chat {}: {}:{} runs gadget {} (disabled until a person who may decide in {} enables it: `gatehouse hook enable {}`)",
        h.id,
        inline(&h.chat),
        inline(&h.gatekeeper),
        inline(&h.trigger),
        inline(&h.gadget),
        inline(&h.chat),
        h.id
    );
    if let (Some(address), Some(secret)) = (address, &added.secret) {
        outln!("webhook URL (shown once): {address}");
        outln!("signing secret (shown once): {secret}");
        outln!(
            "deliveries must carry X-Gatehouse-Signature: sha256=HEX, the HMAC-SHA256 of the raw body keyed with the secret"
        );
    }
    if let Some(s) = h.every_secs {
        outln!("it fires every {s} s while `gatehouse serve` runs, once enabled");
    }
}

async fn show(kernel: &Kernel, me: &str, id: i64, json: bool) -> anyhow::Result<()> {
    let Some(shown) = kernel.person(me).hook_shown(id).await? else {
        anyhow::bail!("no hook {id} that you may see; `gatehouse hooks` lists them");
    };
    if json {
        return super::print_json(&shown);
    }
    out!("{}", shown.prompt);
    for f in &shown.firings {
        outln!(
            "  firing {} ({}) for {}: {}{}",
            f.id,
            f.cause,
            inline(&f.person),
            f.outcome,
            f.note
                .as_deref()
                .map(|n| format!(": {}", crate::prompt::excerpt(n, 200)))
                .unwrap_or_default()
        );
    }
    Ok(())
}

async fn enable(kernel: &Kernel, me: &str, id: i64, json: bool) -> anyhow::Result<()> {
    // Shown first, exactly as `hook show` prints it (SPEC H1, R1).
    let Some(shown) = kernel.person(me).hook_shown(id).await? else {
        anyhow::bail!("no hook {id} that you may see; `gatehouse hooks` lists them");
    };
    if !json {
        out!("{}", shown.prompt);
    }
    // What it enables is the code the prompt showed: a re-install while
    // it was read is refused.
    let h = kernel
        .person(me)
        .set_hook_enabled(id, true, shown.code.as_deref())
        .await?;
    super::print_record(&h, json, |h| {
        outln!(
            "enabled hook {}: its turns run as hook {} in {} for {}",
            h.id,
            h.id,
            inline(&h.chat),
            inline(me)
        )
    })
}

/// `gatehouse hooks`: one line per hook.
pub async fn list(kernel: &Kernel, me: &str, chat: Option<&str>, json: bool) -> anyhow::Result<()> {
    let hooks = kernel.person(me).hooks(chat).await?;
    super::print_record(&hooks, json, |hooks| {
        if hooks.is_empty() {
            outln!(
                "no hooks (add one with `gatehouse hook add CHAT --gatekeeper G --trigger T --gadget GADGET`)"
            );
        }
        hooks.iter().for_each(listed)
    })
}

/// One hook of `gatehouse hooks`.
fn listed(h: &crate::store::Hook) {
    outln!(
        "hook {:<4} {:<12} {}:{} -> {}  {}  {}  fired {}",
        h.id,
        inline(&h.chat),
        inline(&h.gatekeeper),
        inline(&h.trigger),
        inline(&h.gadget),
        match h.every_secs {
            Some(s) => format!("every {s} s"),
            None => "webhook".to_owned(),
        },
        match (&h.enabled, &h.enabled_by) {
            (true, Some(p)) => format!("enabled by {}", inline(p)),
            _ => "disabled".to_owned(),
        },
        h.firings
    );
}
