//! The tables known to this process and the trees a transaction spans: the meta, event and
//! settings trees first, then each table's tree followed by its index trees.

use rustc_hash::FxHashMap as HashMap;

use crate::StoreError;
use crate::encoding::{EVENTS_TREE, META_TREE, SETTINGS_TREE, StoredTable, index_tree, table_tree};
use crate::kv::{Db, TreeSet};

/// Positions of the fixed trees in [`Registry::trees`].
pub(crate) const META_IX: usize = 0;
pub(crate) const EVENTS_IX: usize = 1;
pub(crate) const SETTINGS_IX: usize = 2;

/// The tables known to this process and the trees a transaction spans.
pub(crate) struct Registry {
    /// meta, events, settings, then each table's tree and index trees.
    pub trees: TreeSet,
    pub tables: HashMap<String, TableHandle>,
}

/// Where one table's trees are in [`Registry::trees`].
pub(crate) struct TableHandle {
    pub def: StoredTable,
    /// Position of the table's tree in `Registry::trees`.
    pub tree: usize,
    /// Positions of the index trees, in `def.indexes` order.
    pub indexes: Vec<usize>,
}

impl Registry {
    pub(crate) fn build(db: &Db, defs: Vec<StoredTable>) -> Result<Registry, StoreError> {
        let mut trees = vec![db.open_tree(META_TREE)?, db.open_tree(EVENTS_TREE)?, db.open_tree(SETTINGS_TREE)?];
        // Index entries change only with their record, and event numbers are written once: only
        // records, settings and meta values need their writers kept apart (see `kv::TreeSet`).
        let mut locked = vec![true, false, true];
        let mut tables = HashMap::default();
        for def in defs {
            let tree = trees.len();
            trees.push(db.open_tree(table_tree(&def.name))?);
            locked.push(true);
            let mut indexes = Vec::new();
            for ix in &def.indexes {
                indexes.push(trees.len());
                trees.push(db.open_tree(index_tree(&def.name, &ix.name))?);
                locked.push(false);
            }
            tables.insert(def.name.clone(), TableHandle { def, tree, indexes });
        }
        Ok(Registry { trees: TreeSet::new(trees, locked), tables })
    }
}
