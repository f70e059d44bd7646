import { renderTable } from '../../src/cli/table';

describe('renderTable', () => {
  it('aligns columns and keeps one line per row', () => {
    const out = renderTable(
      ['id', 'evento'],
      [
        { id: 1, evento: 'a\nb' },
        { id: 22, evento: null },
      ],
    );
    expect(out.split('\n')).toEqual(['id  evento', '--  ------', '1   a b', '22']);
  });
  it('says when there is nothing', () => {
    expect(renderTable(['id'], [])).toBe('(no rows)');
  });
});
