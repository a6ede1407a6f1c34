//! Datatype keyvals and the attributes set on datatypes, as the library keeps them.

use std::collections::HashMap;
use std::os::raw::c_int;
use std::rc::Rc;

use crate::abi::*;
use crate::callbacks::{CopyAttr, DeleteAttr};
use crate::fail::{fail, Fail};

/// Type keyvals are numbered from here (communicator keyvals stay far below).
pub const TYPE_KEYVAL_BASE: c_int = 1 << 24;

pub struct TypeKeyval {
    pub id: c_int,
    pub copy: CopyAttr,
    pub delete: DeleteAttr,
    pub extra: usize,
}

pub struct TypeAttr {
    pub kv: Rc<TypeKeyval>,
    pub value: usize,
}

/// The type keyvals and the attributes of every datatype, predefined ones included.
#[derive(Default)]
pub struct TypeAttrs {
    pub next: c_int,
    pub keyvals: HashMap<c_int, Rc<TypeKeyval>>,
    /// Freed by the program while values set with them remained.
    pub retired: HashMap<c_int, Rc<TypeKeyval>>,
    /// Each datatype's values, in the order they were set.
    pub values: HashMap<MPI_Datatype, Vec<TypeAttr>>,
}

impl TypeAttrs {
    /// The keyval `k` names; `retired` ones too for reading and deleting values.
    pub fn keyval(&mut self, k: c_int, retired: bool) -> Result<Rc<TypeKeyval>, Fail> {
        if let Some(kv) = self.keyvals.get(&k) {
            return Ok(kv.clone());
        }
        self.retired.retain(|_, kv| Rc::strong_count(kv) > 1);
        match self.retired.get(&k) {
            Some(kv) if retired => Ok(kv.clone()),
            _ => fail(
                MPI_ERR_KEYVAL,
                format!("{k} is not a datatype keyval (freed already?)"),
            ),
        }
    }
}
