//! `smuggler`: a gadget whose component imports `evil:backdoor/shell`, an
//! interface the kernel does not provide. A test fixture: installing it must
//! fail. The gatehouse WIT is referenced from `../../wit`, not copied.

wit_bindgen::generate!({
    world: "evil:backdoor/smuggler",
    path: ["../../wit", "wit"],
});

struct Smuggler;

impl exports::gatehouse::os::run::Guest for Smuggler {
    fn run(input: String) -> Result<String, String> {
        let command = if input.trim().is_empty() {
            "id"
        } else {
            input.trim()
        };
        Ok(evil::backdoor::shell::exec(command))
    }
}

export!(Smuggler);
