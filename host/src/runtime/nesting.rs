//! The nesting check: how deep a component's structure may go before the
//! compiler sees it (SPEC X3).
//!
//! wasmparser reads a component type that contains a component or instance
//! type by recursion, and the validator and wasmtime's type conversion
//! recurse the same way. A few kilobytes of `(type (component (type
//! (component ...))))` nested a few thousand deep therefore overflow the
//! compiling thread's stack, which aborts the whole process: no error, no
//! refusal, a dead host. A bigger stack only moves that cliff, since each
//! level costs three bytes of input.
//!
//! So before anything recursive touches the bytes, this module walks them
//! *iteratively*, with an explicit stack, and refuses a component whose
//! types or nested components go deeper than [`MAX_TYPE_DEPTH`] or
//! [`MAX_COMPONENT_DEPTH`]. Leaves (everything that cannot contain a
//! component or instance type) are read with wasmparser's own readers, the
//! same version wasmtime uses, so this walk accepts exactly the grammar the
//! compiler will. Owns only this shape check; whether a component is valid
//! is still wasmtime's call.

use anyhow::bail;
use wasmparser::{
    BinaryReader, ComponentImport, ComponentType, InstanceTypeDeclaration, Parser, Payload,
};

/// The deepest component/instance type nesting admitted. Real components
/// (wit-component's output, componentize-py, componentize-js) nest three or
/// four levels; wasmparser's own limit for value types is 100.
pub const MAX_TYPE_DEPTH: usize = 100;

/// The deepest nesting of components (and modules) inside components.
pub const MAX_COMPONENT_DEPTH: usize = 100;

/// Refuse `bytes` if its nesting is deeper than the compiler can take, or
/// if it is malformed where the walk had to read it. Never recurses.
pub fn check(bytes: &[u8]) -> anyhow::Result<()> {
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(malformed)?;
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => {
                depth += 1;
                if depth > MAX_COMPONENT_DEPTH {
                    bail!(
                        "the component nests components more than {MAX_COMPONENT_DEPTH} deep; a component this deep is refused before compiling (real components nest a few levels)"
                    );
                }
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentTypeSection(section) => {
                let range = section.range();
                let Some(data) = bytes.get(range.clone()) else {
                    bail!(
                        "not a valid WebAssembly component: a type section runs past the end of the file"
                    );
                };
                check_types(BinaryReader::new(data, range.start))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// What an open level of the walk is reading.
#[derive(Clone, Copy)]
enum Level {
    /// The section's list of types.
    Section,
    /// A component type's declarations.
    Component,
    /// An instance type's declarations.
    Instance,
}

/// Walk one component type section with an explicit stack of open levels,
/// each with the number of items it still has to read.
fn check_types(mut r: BinaryReader<'_>) -> anyhow::Result<()> {
    let count = r.read_var_u32().map_err(malformed)?;
    let mut open: Vec<(Level, u32)> = vec![(Level::Section, count)];
    while let Some((level, left)) = open.last_mut() {
        if *left == 0 {
            open.pop();
            continue;
        }
        *left -= 1;
        let level = *level;
        match level {
            Level::Section => open_type(&mut r, &mut open)?,
            Level::Component | Level::Instance => {
                match peek(&r)? {
                    // An import: component types only; no nested type.
                    0x03 if matches!(level, Level::Component) => {
                        r.read_u8().map_err(malformed)?;
                        r.read::<ComponentImport<'_>>().map_err(malformed)?;
                    }
                    // A type declaration: the only place types nest.
                    0x01 => {
                        r.read_u8().map_err(malformed)?;
                        open_type(&mut r, &mut open)?;
                    }
                    // A core type, an alias or an export: leaves.
                    _ => {
                        r.read::<InstanceTypeDeclaration<'_>>().map_err(malformed)?;
                    }
                }
            }
        }
        // The section itself is level 0, so a type at depth N keeps N + 1
        // levels open.
        if open.len() > MAX_TYPE_DEPTH + 1 {
            bail!(
                "the component's types are nested more than {MAX_TYPE_DEPTH} deep; a component this deep is refused before compiling (real components nest a few levels)"
            );
        }
    }
    Ok(())
}

/// Read one component type: a component or instance type opens a level;
/// anything else is a leaf read whole.
fn open_type(r: &mut BinaryReader<'_>, open: &mut Vec<(Level, u32)>) -> anyhow::Result<()> {
    match peek(r)? {
        0x41 => {
            r.read_u8().map_err(malformed)?;
            let n = r.read_var_u32().map_err(malformed)?;
            open.push((Level::Component, n));
        }
        0x42 => {
            r.read_u8().map_err(malformed)?;
            let n = r.read_var_u32().map_err(malformed)?;
            open.push((Level::Instance, n));
        }
        _ => {
            r.read::<ComponentType<'_>>().map_err(malformed)?;
        }
    }
    Ok(())
}

/// The next byte, not consumed.
fn peek(r: &BinaryReader<'_>) -> anyhow::Result<u8> {
    r.clone().read_u8().map_err(malformed)
}

fn malformed(e: wasmparser::BinaryReaderError) -> anyhow::Error {
    anyhow::anyhow!(
        "not a valid WebAssembly component: {}",
        super::one_line(&e.to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `\0asm`, component version 0x0d, layer 1.
    const HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    /// A component whose one type nests `depth` component types.
    fn nested_types(depth: usize, instance: bool) -> Vec<u8> {
        let mut body = vec![1u8]; // one type in the section
        for _ in 0..depth {
            body.extend([if instance { 0x42 } else { 0x41 }, 1, 0x01]);
        }
        body.extend([0x41, 0]); // the innermost: an empty component type
        let mut out = HEADER.to_vec();
        out.push(7); // component type section
        leb(body.len(), &mut out);
        out.extend(body);
        out
    }

    #[test]
    fn shallow_types_pass_and_deep_ones_are_refused_without_recursion() {
        check(&nested_types(3, false)).unwrap();
        check(&nested_types(3, true)).unwrap();
        check(&nested_types(MAX_TYPE_DEPTH - 1, false)).unwrap();
        for instance in [false, true] {
            // Deep enough to overflow any stack a recursive reader could have.
            let e = check(&nested_types(200_000, instance)).unwrap_err();
            assert!(format!("{e:#}").contains("nested more than"), "{e:#}");
        }
    }

    #[test]
    fn the_real_guests_pass() {
        for g in ["triage", "issues", "script", "rogue"] {
            let bytes = std::fs::read(crate::guests::path(g)).unwrap();
            check(&bytes).unwrap_or_else(|e| panic!("{g}: {e:#}"));
        }
    }
}
