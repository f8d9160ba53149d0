/** What GET .../messages/:id answers for a message (its `result`), as the upgrade tests read it. */
export interface Lookup {
  id: string;
  state: string;
  attempts: number;
  timestamp_ms: number;
  visible_at_ms: number;
  size: number;
  content_type: string;
}
