// Types that tokenprobe's Grafana dashboards are checked against, built from Grafana's own schema
// package (@grafana/schema: the dashboard model and each panel plugin's options).
//
// How the check is sound: typecheck.mjs writes each dashboard's JSON into a .ts file as an object
// literal `... satisfies StrictDashboard`. A literal in place (unlike a `resolveJsonModule` import,
// whose type is widened and never checked for unknown keys) gets
//   - every field's type checked (a string where a number belongs fails),
//   - excess property checks (a misspelt or unknown key fails), also per panel type, since `type`
//     discriminates the panel union below,
//   - string literals checked against the schema's enums and literal unions.
// typecheck.mjs also type-checks deliberately broken copies and fails unless each is rejected.

import type {
  DataQuery,
  Dashboard,
  FieldConfig,
  FieldConfigSource,
  Panel,
  RowPanel,
  VariableModel,
} from "@grafana/schema";
import type * as heatmap from "@grafana/schema/dist/esm/raw/composable/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen";
import type * as stat from "@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen";
import type * as table from "@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen";
import type * as timeseries from "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";

// The JSON form of a schema type. The schema declares some fields as TypeScript enums
// (FieldColorModeId, ThresholdsMode, ...); JSON holds their values, so a string enum becomes the
// union of its values (`${E}`). Numeric enums accept their member values as number literals.
export type Json<T> = T extends string
  ? `${T}`
  : T extends number | boolean | null | undefined
    ? T
    : T extends ReadonlyArray<infer U>
      ? Array<Json<U>>
      : T extends object
        ? { [K in keyof T]: Json<T[K]> }
        : T;

// A Prometheus query of a panel. @grafana/schema types a target only as DataQuery (refId, hide,
// datasource, ...); the Prometheus plugin's own fields are these (its dataquery.cue in Grafana).
export type PromQuery = Json<DataQuery> & {
  expr: string;
  legendFormat?: string;
  format?: "time_series" | "table" | "heatmap";
  instant?: boolean;
  range?: boolean;
  interval?: string;
  intervalFactor?: number;
  exemplar?: boolean;
  editorMode?: "code" | "builder";
};

type PanelBase = Omit<Json<Panel>, "type" | "options" | "fieldConfig" | "targets"> & {
  targets: Array<PromQuery>;
};

type FieldConfigWith<Custom> = Omit<Json<FieldConfigSource>, "defaults"> & {
  defaults: Omit<Json<FieldConfig>, "custom"> & { custom?: Json<Custom> };
};

type TypedPanel<Type extends string, Options, Custom> = PanelBase & {
  type: Type;
  options: Json<Options>;
  fieldConfig: FieldConfigWith<Custom>;
};

// Stat panels have no custom field config.
type NoCustom = Record<string, never>;

export type TimeSeriesPanel = TypedPanel<"timeseries", timeseries.Options, timeseries.FieldConfig>;
export type StatPanel = TypedPanel<"stat", stat.Options, NoCustom>;
export type TablePanel = TypedPanel<"table", table.Options, table.FieldConfig>;
export type HeatmapPanel = TypedPanel<"heatmap", heatmap.Options, heatmap.FieldConfig>;
// An expanded row's panels follow it at the top level; a collapsed row (the model-server rows)
// holds its panels, which are not rows.
type ContentPanel = TimeSeriesPanel | StatPanel | TablePanel | HeatmapPanel;
export type Row = Omit<Json<RowPanel>, "panels" | "collapsed"> &
  ({ collapsed: false; panels: [] } | { collapsed: true; panels: Array<ContentPanel> });

export type StrictPanel = TimeSeriesPanel | StatPanel | TablePanel | HeatmapPanel | Row;

// What a provisioned dashboard must have (uid and title are optional in the general model).
export type StrictDashboard = Omit<Json<Dashboard>, "panels" | "templating" | "uid" | "title"> & {
  uid: string;
  title: string;
  panels: Array<StrictPanel>;
  templating: { list: Array<Json<VariableModel>> };
};
